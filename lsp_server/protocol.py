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

pygls keeps every open document whole and applies each `didChange` to it before any handler of ours runs: a
client appending without end grew one past 400 MB. `didOpen` and `didChange` are applied here instead, and a
document larger than `server.max_document_bytes` is no longer kept: it is dropped as if closed (the index goes
back to the file on disk), with one `window/showMessage`; its later changes are ignored until it is reopened.

pygls also files the future of every notification's handler (and of each step of its generator handlers) in
`_request_futures` under a made-up id that only a response would remove: one future per keystroke, kept for
the whole session. `_execute_handler` forgets those once they finish. pygls' `shutdown` cancels the futures still
pending while iterating that dict, and cancelling one runs its callbacks at once, which remove it: "dictionary
changed size during iteration" answered a `shutdown` sent while a notification's handler was still running.
`lsp_shutdown` cancels over a copy.

The protocol knows nothing of the server beyond `ProtocolHooks`, the few callbacks it makes (the server sets
`hooks`); the transport reads `exit_code` to know when the session is over.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Generator
from typing import Any, Protocol

from lsprotocol import types
from pygls.protocol import LanguageServerProtocol, lsp_method

from lsp_server.convert import document_key, utf8_size_over
from lsp_server.foreground import FOREGROUND
from lsp_server.framing import MAX_MESSAGE_BYTES

logger = logging.getLogger(__name__)

_ALWAYS_ALLOWED = frozenset({types.EXIT})


class ProtocolHooks(Protocol):
    """What the protocol asks of the server it serves."""

    def max_document_bytes(self) -> int:
        """Documents larger than this are not kept (`server.maxDocumentBytes`)."""
        ...

    def warn_once(self, kind: str, message: str) -> None:
        """Tell the user, once per kind."""
        ...

    def document_changing(self, uri: str, old: str, change: types.TextDocumentContentChangeEvent) -> None:
        """`change` is about to be applied to the document's text `old`."""
        ...


class _NoHooks:
    """Until the server sets its own."""

    def max_document_bytes(self) -> int:
        return MAX_MESSAGE_BYTES

    def warn_once(self, kind: str, message: str) -> None:
        logger.warning("%s: %s", kind, message)

    def document_changing(self, uri: str, old: str, change: types.TextDocumentContentChangeEvent) -> None:
        return None


class RepocompProtocol(LanguageServerProtocol):
    """pygls' language server protocol with a response for every request (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hooks: ProtocolHooks = _NoHooks()
        self.initialize_received = False
        self.exit_code: int | None = None  # set by `exit`: the session is over
        self.oversized: set[str] = set()  # keys of documents dropped for their size, until reopened or closed

    @property
    def shutdown_received(self) -> bool:
        return self._shutdown

    @property
    def handlers_running(self) -> int:
        """Requests being answered (flat over a session: no leaked futures, see the module docstring)."""
        return len(self._request_futures)

    def handle_body(self, body: bytes) -> None:
        """Decode, check and dispatch one frame's body; never raises (one message must not end the server)."""
        try:
            with FOREGROUND.busy():  # a save beside it waits (lsp_server.foreground)
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

    # ----- documents, bounded (see the module docstring) -----

    def _document_limit(self) -> int:
        return self.hooks.max_document_bytes()

    def _drop_oversized(self, uri: str) -> Generator[Any, Any, None]:
        """Stop keeping a document past the size limit: the workspace forgets it, the server treats it as closed."""
        self.workspace.remove_text_document(uri)
        self.oversized.add(document_key(uri))
        limit = self._document_limit()
        self.hooks.warn_once("huge", f"{uri} is larger than {limit} bytes (server.maxDocumentBytes): repocomp "
                                     "stops following it and does not complete in it until it is reopened smaller")
        if (user_handler := self.fm.features.get(types.TEXT_DOCUMENT_DID_CLOSE)) is not None:
            closed = types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
            yield user_handler, (closed,), None

    @lsp_method(types.TEXT_DOCUMENT_DID_OPEN)
    def lsp_text_document__did_open(self, params: types.DidOpenTextDocumentParams) -> Generator[Any, Any, None]:
        uri = params.text_document.uri
        self.oversized.discard(document_key(uri))
        self.workspace.put_text_document(params.text_document)
        if utf8_size_over(params.text_document.text, self._document_limit()):
            yield from self._drop_oversized(uri)
            return
        if (user_handler := self.fm.features.get(types.TEXT_DOCUMENT_DID_OPEN)) is not None:
            yield user_handler, (params,), None

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams
                                      ) -> Generator[Any, Any, None]:
        uri = params.text_document.uri
        document = self.workspace.text_documents.get(document_key(uri))
        if document is None:  # dropped for its size, or never opened (pygls raised KeyError): nothing to apply
            logger.debug("change to %s ignored: the document is not kept", uri)
            return
        limit = self._document_limit()
        for change in params.content_changes:
            # checked after each change: a document is at most the limit plus one message (framing's bound)
            self.hooks.document_changing(uri, document.source, change)  # the session memory's edit
            self.workspace.update_text_document(params.text_document, change)
            if utf8_size_over(document.source, limit):
                yield from self._drop_oversized(uri)
                return
        if (user_handler := self.fm.features.get(types.TEXT_DOCUMENT_DID_CHANGE)) is not None:
            yield user_handler, (params,), None

    @lsp_method(types.TEXT_DOCUMENT_DID_CLOSE)
    def lsp_text_document__did_close(self, params: types.DidCloseTextDocumentParams) -> Generator[Any, Any, None]:
        self.oversized.discard(document_key(params.text_document.uri))
        yield from super().lsp_text_document__did_close(params)

    @lsp_method(types.SHUTDOWN)
    def lsp_shutdown(self, *args: Any) -> Generator[Any, Any, None]:
        """pygls' shutdown, cancelling the pending handlers over a copy of the dict their callbacks change."""
        if (user_handler := self.fm.features.get(types.SHUTDOWN)) is not None:
            yield user_handler, args, None
        current_id = self.msg_id  # the shutdown request's own future must stay: its response is still to send
        for msg_id, future in list(self._request_futures.items()):
            if msg_id != current_id and not future.done():
                future.cancel()
        self._shutdown = True

    @lsp_method(types.EXIT)
    def lsp_exit(self, *args: Any) -> Generator[Any, Any, None]:
        """Stop the message loop; the exit code is 0 after `shutdown`, else 1 (pygls' `sys.exit` is lost)."""
        if (user_handler := self.fm.features.get(types.EXIT)) is not None:
            yield user_handler, args, None
        self.exit_code = 0 if self._shutdown else 1


def _id_of(data: Any) -> int | str | None:
    """The message's id if it is a valid JSON-RPC id (an integer or a string), else None."""
    msg_id = data.get("id") if isinstance(data, dict) else None
    return msg_id if isinstance(msg_id, (int, str)) and not isinstance(msg_id, bool) else None


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    for sub in getattr(exc, "exceptions", ()):  # cattrs' ClassValidationError groups the real causes
        text += f"; {_short(sub)}"
    return text[:300]
