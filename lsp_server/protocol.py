"""The JSON-RPC layer of the server: every request gets a response, whatever arrives in a frame.

pygls 2.x decodes a body with `json.loads(body, object_hook=structure_message)` and, when that fails (invalid
JSON, or params lsprotocol refuses such as a position of -1 or 2**31), only logs: the request is never answered
and the editor waits forever. It also drops requests after `shutdown` silently, serves requests before
`initialize`, and its `exit` leaves through `sys.exit` from inside the event loop, which `start_io` swallows, so
the process always exits 0. `RepocompProtocol.handle_body` replaces that decoding step:

- invalid JSON: ParseError (-32700) with id null (the id cannot be known);
- JSON that is not a JSON-RPC 2.0 message: InvalidRequest (-32600), with the id when one can be read;
- a request before `initialize`: ServerNotInitialized (-32002); a notification then is dropped (except `exit`);
- a request after `shutdown`: InvalidRequest; a notification then is dropped (except `exit`);
- params that do not match the method's lsprotocol type: InvalidParams (-32602) with the request's id;
- `exit` stops the message loop and records the exit code: 0 after `shutdown`, 1 without.

pygls also files the future of every notification's handler (and of each step of its generator handlers) in
`_request_futures` under a made-up id that only a response would remove: one future per keystroke, kept for
the whole session. `_execute_handler` forgets those once they finish.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Generator
from typing import Any

from lsprotocol import types
from pygls.protocol import LanguageServerProtocol, lsp_method

logger = logging.getLogger(__name__)

_ALWAYS_ALLOWED = frozenset({types.EXIT})


class RepocompProtocol(LanguageServerProtocol):
    """pygls' language server protocol with a response for every request (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.initialize_received = False
        self.exit_code: int | None = None  # set by `exit`

    @property
    def shutdown_received(self) -> bool:
        return self._shutdown

    def handle_body(self, body: bytes) -> None:
        """Decode, check and dispatch one frame's body; never raises (one message must not end the server)."""
        try:
            self._handle_body(body)
        except BrokenPipeError:
            raise  # the client is gone: the transport ends the session
        except Exception:
            logger.exception("unexpected failure handling a message")

    def _handle_body(self, body: bytes) -> None:
        try:
            data = json.loads(body)
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            self.reply_error(None, types.ErrorCodes.ParseError, f"invalid JSON: {exc}")
            return
        if not isinstance(data, dict) or data.get("jsonrpc") != self.VERSION:
            self.reply_error(_id_of(data), types.ErrorCodes.InvalidRequest, "not a JSON-RPC 2.0 message object")
            return
        method = data.get("method")
        if "method" not in data:  # a response to one of our requests
            self._dispatch(data, request_id=None)
            return
        is_request = "id" in data
        if not isinstance(method, str) or (is_request and _id_of(data) is None):
            self.reply_error(_id_of(data), types.ErrorCodes.InvalidRequest, "invalid method or id")
            return
        refusal = self._refusal(method)
        if refusal is not None:
            code, message = refusal
            if is_request:
                self.reply_error(data["id"], code, message)
            else:
                logger.warning("dropped notification %r: %s", method, message)
            return
        self._dispatch(data, request_id=data["id"] if is_request else None)

    def _refusal(self, method: str) -> tuple[types.ErrorCodes, str] | None:
        """Why a message must not be handled now (LSP lifecycle), or None."""
        if method in _ALWAYS_ALLOWED:
            return None
        if not self.initialize_received and method != types.INITIALIZE:
            return types.ErrorCodes.ServerNotInitialized, f"{method} before initialize"
        if self.initialize_received and method == types.INITIALIZE:
            return types.ErrorCodes.InvalidRequest, "initialize may be sent only once"
        if self._shutdown:
            return types.ErrorCodes.InvalidRequest, f"{method} after shutdown"
        return None

    def _dispatch(self, data: dict[str, Any], request_id: int | str | None) -> None:
        if "method" in data:
            data.setdefault("params", None)  # JSON-RPC lets params be left out; pygls' generic types need the key
        try:
            message = self.structure_message(data)
        except Exception as exc:  # pygls raises JsonRpcInvalidParams / JsonRpcInternalError from cattrs errors
            cause = exc.__cause__ or exc
            if request_id is not None:
                self.reply_error(request_id, types.ErrorCodes.InvalidParams,
                                 f"invalid params for {data.get('method')}: {_short(cause)}")
            else:
                logger.warning("dropped message %r with invalid params: %s", data.get("method"), _short(cause))
            return
        if data.get("method") == types.INITIALIZE:
            self.initialize_received = True  # only a well-formed initialize starts the session
        self.handle_message(message)

    def _execute_handler(self, msg_id: Any, handler: Callable[..., Any], callback: Callable[..., Any],
                         args: tuple[Any, ...] | None = None, kwargs: dict[str, Any] | None = None) -> None:
        super()._execute_handler(msg_id, handler, callback, args, kwargs)
        answers_request = isinstance(callback, functools.partial) and callback.func == self._send_handler_result
        future = None if answers_request else self._request_futures.get(msg_id)
        if future is not None:  # no response will remove it (see the module docstring)
            future.add_done_callback(lambda _: self._request_futures.pop(msg_id, None))

    def reply_error(self, request_id: int | str | None, code: int, message: str) -> None:
        logger.debug("answering %s with error %d: %s", request_id, int(code), message)
        # a plain dict: lsprotocol's ResponseErrorMessage drops "id": null, which JSON-RPC requires here
        self._send_data({"jsonrpc": self.VERSION, "id": request_id, "error": {"code": int(code), "message": message}})

    @lsp_method(types.EXIT)
    def lsp_exit(self, *args: Any) -> Generator[Any, Any, None]:
        """Stop the message loop; the exit code is 0 after `shutdown`, else 1 (pygls' `sys.exit` is lost)."""
        if (user_handler := self.fm.features.get(types.EXIT)) is not None:
            yield user_handler, args, None
        self.exit_code = 0 if self._shutdown else 1
        stop = self._server._stop_event
        if stop is not None:
            stop.set()


def _id_of(data: Any) -> int | str | None:
    """The message's id if it is a valid JSON-RPC id (an integer or a string), else None."""
    msg_id = data.get("id") if isinstance(data, dict) else None
    return msg_id if isinstance(msg_id, (int, str)) and not isinstance(msg_id, bool) else None


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    for sub in getattr(exc, "exceptions", ()):  # cattrs' ClassValidationError groups the real causes
        text += f"; {_short(sub)}"
    return text[:300]
