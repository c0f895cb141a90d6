"""vLLM (or any OpenAI-compatible server) over HTTP: `/v1/completions`, streamed as server-sent events.

- One `httpx.AsyncClient`, any number of endpoints; each request goes to the endpoint with the fewest requests in
  flight (ties: round robin), endpoints that just refused a connection are tried last for a few seconds.
- Timeouts everywhere: `connect_timeout_s` to connect, and `timeout_s` as the total deadline of a request
  (retries included), which also bounds every read while streaming; a request's own `deadline` (the whole
  completion's, set by the pipeline) can only shorten it.
- Size bounds: a streamed answer stops after `max_new_tokens` text events (each carries at least one token, so
  a server that keeps streaming past the budget is cut off there) or `max_new_tokens x MAX_TOKEN_BYTES` bytes;
  an SSE line longer than `MAX_SSE_LINE_BYTES` is a malformed stream. Bodies (errors, non-streamed answers) are
  read up to a cap too. An endless line otherwise grew past 1 GB before the deadline.
- Retries with exponential backoff on connection failures and 5xx answers, but only before any text arrived.
- Cancellation: cancelling `agenerate` (or leaving an `astream` loop) closes the HTTP response, so the server
  sees the client go away and aborts the request, freeing its batch slot.
- Every httpx failure is translated here into `BackendError` saying which endpoint did what.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

import httpx

from repocomp.backends.base import Capabilities, Generation, GenerationRequest, loop_deadline
from repocomp.backends.profile import ModelProfile, served_profile, tokenizer_folder
from repocomp.config.schema import BackendConfig, check_endpoint
from repocomp.errors import BackendError
from repocomp.text import encodable

log = logging.getLogger(__name__)

DOWN_COOLDOWN_S = 5.0  # an endpoint that refused a connection goes to the back of the queue this long
MAX_SSE_LINE_BYTES = 1 << 16  # one event is a few hundred bytes; a line this long is no sane event
MAX_TOKEN_BYTES = 64  # generous bytes per token (the longest BPE tokens are runs of about 16 spaces or symbols)
MAX_ERROR_BODY_BYTES = 1 << 14  # what is read of an error answer's body for the message
_QWEN_CODER_NAME = re.compile(r"qwen2\.5-coder", re.IGNORECASE)


@dataclass(frozen=True)
class _Deadline:
    at: float  # time.monotonic()
    seconds: float  # the budget it stands for, for messages


@dataclass
class _Endpoint:
    url: str  # base URL without a trailing /v1
    in_flight: int = 0
    down_until: float = 0.0


def _deadline(request: GenerationRequest, timeout_s: float) -> _Deadline:
    """`timeout_s` from now, or the request's own (the completion's) deadline when that comes first."""
    now = time.monotonic()
    if request.deadline is not None and request.deadline < now + timeout_s:
        return _Deadline(request.deadline, max(0.0, request.deadline - now))
    return _Deadline(now + timeout_s, timeout_s)


def _secs(seconds: float) -> str:
    return f"{round(seconds, 2):g}s"


def _answer_cap(request: GenerationRequest) -> int:
    """Bytes of answer text accepted for `request` (see MAX_TOKEN_BYTES)."""
    return max(1, request.max_new_tokens) * MAX_TOKEN_BYTES


class _Retryable(Exception):
    """Internal: this attempt failed in a way another attempt (or endpoint) may not."""


def _base_url(url: str) -> str:
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


class VLLMBackend:
    name = "vllm"
    capabilities = Capabilities(writes=True, in_process=False)  # the server holds the model, warm

    @classmethod
    def profile(cls, config: BackendConfig) -> ModelProfile:
        """A served model's defaults; the prompt counted with the local model's tokenizer where `repocomp model
        serve` serves a prepared model under its name, and Qwen2.5-Coder's format for a model named so."""
        from repocomp.backends.local_model import MODELS, default_model_dir, prepared

        local = prepared(default_model_dir(config.model) if config.model in MODELS else None)
        served_local = local is not None and config.model in (local.name, str(local.path))
        tokenizer = tokenizer_folder(str(local.path)) if served_local and local is not None else ""
        return served_profile(config.max_new_tokens, tokenizer, bool(_QWEN_CODER_NAME.search(config.model)))

    def __init__(
        self,
        endpoints: tuple[str, ...] | list[str],
        model: str = "",
        timeout_s: float = 30.0,
        connect_timeout_s: float = 3.0,
        retries: int = 2,
        backoff_s: float = 0.1,
        stream: bool = True,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if not endpoints:
            raise BackendError("vllm backend: no endpoints configured (set [backend.vllm] endpoints)")
        self.endpoints: list[_Endpoint] = []
        self.malformed: list[str] = []  # why each skipped endpoint is unusable (allowed with a fallback)
        for url in endpoints:
            try:
                check_endpoint(url)
            except ValueError as exc:
                self.malformed.append(str(exc))
                log.warning("vllm: %s; not used", exc)
            else:
                self.endpoints.append(_Endpoint(_base_url(url)))
        self.model = model  # "" = ask the server (`/v1/models`) on first use
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.stream = stream  # agenerate streams too: a disconnect is noticed sooner, and reads stay bounded
        self._rr = 0
        self._transport = transport
        self._clients: dict[int, tuple[asyncio.AbstractEventLoop, httpx.AsyncClient]] = {}

    @property
    def _client(self) -> httpx.AsyncClient:
        """One client per event loop: pooled connections belong to the loop that opened them (a CLI may call
        asyncio.run more than once)."""
        loop = asyncio.get_running_loop()
        for key, (lp, _) in list(self._clients.items()):
            if lp.is_closed():
                del self._clients[key]  # its sockets died with its loop
        entry = self._clients.get(id(loop))
        if entry is None or entry[0] is not loop:
            client = httpx.AsyncClient(
                timeout=httpx.Timeout(self.timeout_s, connect=self.connect_timeout_s),
                # The server is local or in the cluster: an HTTP(S)_PROXY meant for the internet must not capture it.
                trust_env=False,
                transport=self._transport,
            )
            entry = self._clients[id(loop)] = (loop, client)
        return entry[1]

    @classmethod
    def from_config(cls, config: BackendConfig) -> VLLMBackend:
        return cls(
            endpoints=config.vllm.endpoints,
            model=config.model,
            timeout_s=config.timeout_s,
            connect_timeout_s=config.vllm.connect_timeout_s,
            retries=config.vllm.retries,
        )

    # ---- endpoint choice -------------------------------------------------------------------------------

    def _order(self) -> list[_Endpoint]:
        """Endpoints in the order to try: healthy first, fewest in flight first, ties round robin."""
        if not self.endpoints:  # like endpoints that are all down, without touching the network
            raise BackendError(f"vllm: no usable endpoint: {'; '.join(self.malformed)}")
        now = time.monotonic()
        n = len(self.endpoints)
        start = self._rr % n
        self._rr += 1
        rotated = self.endpoints[start:] + self.endpoints[:start]
        return sorted(rotated, key=lambda e: (e.down_until > now, e.in_flight))  # sort is stable

    # ---- public API -------------------------------------------------------------------------------------

    async def agenerate(self, request: GenerationRequest) -> Generation:
        if not self.stream:
            text = await self._complete_once(request)
            return Generation(text=text, backend=self.name)
        text = ""
        # max_time_s after the first piece, the text so far is the answer (the limit bounds a run-on generation,
        # not the prompt's prefill)
        limit = asyncio.timeout(None)
        try:
            async with limit:
                # aclosing: a cancelled or failed collection closes the stream (and so the HTTP response) here.
                async with contextlib.aclosing(self.astream(request)) as stream:
                    async for piece in stream:
                        if not text and request.max_time_s:
                            limit.reschedule(asyncio.get_running_loop().time() + request.max_time_s)
                        text += piece
                        if request.finished is not None and request.finished(text):
                            break  # the rest cannot change the completion: closing the stream aborts it
        except TimeoutError:
            if not limit.expired():
                raise
        return Generation(text=text, backend=self.name, at_time_limit=limit.expired())

    async def astream(self, request: GenerationRequest) -> AsyncGenerator[str, None]:
        """The completion's text pieces as the server produces them (at most `max_new_tokens` pieces)."""
        deadline = _deadline(request, self.timeout_s)
        payload = await self._payload(request, deadline, stream=True)
        last_error = ""
        for attempt in range(self.retries + 1):
            if attempt:
                await self._sleep_backoff(attempt, deadline, last_error)
            for ep in self._order():
                started = False
                try:
                    # aclosing: when our consumer stops early, the inner stream (and its response) closes now,
                    # not whenever the garbage collector gets to it.
                    async with contextlib.aclosing(self._stream_from(ep, payload, deadline, request)) as pieces:
                        async for piece in pieces:
                            started = True
                            yield piece
                    return
                except _Retryable as exc:
                    if started:  # text already went out: another endpoint would start over
                        raise BackendError(f"vllm: {exc}") from None
                    last_error = str(exc)
                    log.info("vllm attempt %d at %s failed: %s", attempt + 1, ep.url, exc)
        raise BackendError(f"vllm: no endpoint answered after {self.retries + 1} round(s): {last_error}")

    async def aload(self) -> None:
        pass  # the server holds the model

    def stats(self) -> dict[str, Any]:
        return {}  # the server keeps its own (/metrics)

    async def aclose(self) -> None:
        loop = asyncio.get_running_loop()
        clients, self._clients = self._clients, {}
        for lp, client in clients.values():
            if lp is loop:
                await client.aclose()

    async def list_models(self, deadline: float | None = None) -> list[str]:
        """Model names served by the first endpoint that answers `/v1/models`."""
        deadline = deadline if deadline is not None else time.monotonic() + self.timeout_s
        errors = []
        for ep in self._order():
            try:
                async with asyncio.timeout_at(loop_deadline(deadline)):
                    resp = await self._client.get(f"{ep.url}/v1/models")
                resp.raise_for_status()
                return [m["id"] for m in resp.json()["data"]]
            except (httpx.HTTPError, TimeoutError, ValueError, KeyError, TypeError) as exc:
                errors.append(f"{ep.url}: {type(exc).__name__}: {exc}")
        raise BackendError("vllm: cannot list models: " + "; ".join(errors))

    # ---- internals --------------------------------------------------------------------------------------

    async def _payload(self, request: GenerationRequest, deadline: _Deadline, stream: bool) -> dict[str, Any]:
        if not self.model:
            models = await self.list_models(deadline.at)
            if not models:
                raise BackendError("vllm: the server serves no model")
            self.model = models[0]
        # a body is UTF-8: lone surrogates (an undecodable byte of a path in the prompt, half a pair from an editor)
        # are escaped as the token counts saw them, never a UnicodeEncodeError while building the request
        payload: dict[str, Any] = {
            "model": self.model,
            "prompt": encodable(request.prompt),
            "max_tokens": request.max_new_tokens,
            "temperature": request.temperature,
            "stream": stream,
        }
        if request.stop:
            payload["stop"] = [encodable(stop) for stop in request.stop]
            if any(stop.startswith("<|") for stop in request.stop):  # special tokens: kept in the text to match
                payload["skip_special_tokens"] = False
        return payload

    async def _sleep_backoff(self, attempt: int, deadline: _Deadline, last_error: str) -> None:
        delay = self.backoff_s * (2 ** (attempt - 1))
        if time.monotonic() + delay >= deadline.at:
            raise BackendError(f"vllm: no endpoint answered within {_secs(deadline.seconds)}: {last_error}")
        await asyncio.sleep(delay)

    async def _send(self, ep: _Endpoint, payload: dict[str, Any], deadline: _Deadline) -> httpx.Response:
        """POST the request; returns a response with a 2xx status, its body not read yet (callers read it bounded)."""
        url = f"{ep.url}/v1/completions"
        try:
            async with asyncio.timeout_at(loop_deadline(deadline.at)):
                resp = await self._client.send(self._client.build_request("POST", url, json=payload), stream=True)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            ep.down_until = time.monotonic() + DOWN_COOLDOWN_S
            raise _Retryable(f"{ep.url} unreachable ({type(exc).__name__}: {exc or 'no detail'})") from None
        except (TimeoutError, httpx.TimeoutException):
            raise BackendError(f"vllm: {ep.url} did not answer within {_secs(deadline.seconds)}") from None
        except httpx.HTTPError as exc:
            raise _Retryable(f"{ep.url}: {type(exc).__name__}: {exc}") from None
        if resp.status_code >= 400:
            try:
                async with asyncio.timeout_at(loop_deadline(deadline.at)):
                    body = (await _read_upto(resp, MAX_ERROR_BODY_BYTES))[0].decode("utf-8", "replace")
            except (TimeoutError, httpx.HTTPError):
                body = ""
            finally:
                await resp.aclose()
            msg = f"{ep.url} answered HTTP {resp.status_code}: {_error_message(body)}"
            if resp.status_code >= 500:
                raise _Retryable(msg)
            raise BackendError(f"vllm: {msg}")  # 4xx: the request itself is wrong; retrying will not help
        return resp

    async def _complete_once(self, request: GenerationRequest) -> str:
        deadline = _deadline(request, self.timeout_s)
        payload = await self._payload(request, deadline, stream=False)
        limit = _answer_cap(request) + MAX_SSE_LINE_BYTES  # the text plus the JSON around it
        last_error = ""
        for attempt in range(self.retries + 1):
            if attempt:
                await self._sleep_backoff(attempt, deadline, last_error)
            for ep in self._order():
                ep.in_flight += 1
                try:
                    resp = await self._send(ep, payload, deadline)
                    try:
                        async with asyncio.timeout_at(loop_deadline(deadline.at)):
                            body, cut = await _read_upto(resp, limit)
                    except TimeoutError:
                        raise BackendError(f"vllm: {ep.url} did not answer within {_secs(deadline.seconds)}") from None
                    except httpx.HTTPError as exc:
                        raise _Retryable(f"{ep.url} broke the answer: {type(exc).__name__}: {exc}") from None
                    finally:
                        await resp.aclose()
                    if cut:
                        raise BackendError(f"vllm: {ep.url} answered more than {limit} bytes for "
                                           f"{request.max_new_tokens} tokens")
                    try:
                        return str(json.loads(body)["choices"][0]["text"])
                    except (ValueError, KeyError, IndexError, TypeError):
                        raise BackendError(f"vllm: {ep.url} answered a malformed completion: "
                                           f"{body[:200]!r}") from None
                except _Retryable as exc:
                    last_error = str(exc)
                    log.info("vllm attempt %d at %s failed: %s", attempt + 1, ep.url, exc)
                finally:
                    ep.in_flight -= 1
        raise BackendError(f"vllm: no endpoint answered after {self.retries + 1} round(s): {last_error}")

    async def _stream_from(self, ep: _Endpoint, payload: dict[str, Any], deadline: _Deadline,
                           request: GenerationRequest) -> AsyncGenerator[str, None]:
        ep.in_flight += 1
        try:
            resp = await self._send(ep, payload, deadline)
            try:
                events, room = request.max_new_tokens, _answer_cap(request)
                within = _secs(deadline.seconds)
                async with contextlib.aclosing(_sse_lines(resp, ep.url)) as lines:
                    done = False
                    while not done:
                        try:
                            # The deadline wraps each read only, never a `yield`: the consumer's time is its own.
                            async with asyncio.timeout_at(loop_deadline(deadline.at)):
                                line = await anext(lines)
                        except StopAsyncIteration:
                            break
                        except TimeoutError:
                            raise BackendError(f"vllm: {ep.url} stalled: no completion within {within}") from None
                        except httpx.TimeoutException:
                            raise BackendError(f"vllm: {ep.url} stalled: read timed out after {within}") from None
                        except httpx.HTTPError as exc:
                            raise _Retryable(f"{ep.url} broke the stream: {type(exc).__name__}: {exc}") from None
                        piece, done = _parse_sse_line(line, ep.url)
                        if not piece:
                            continue
                        if events == 0 or room <= 0:  # the server streams past the budget it was given: stop
                            log.warning("vllm: %s streamed past %d tokens; answer cut there", ep.url,
                                        request.max_new_tokens)
                            return
                        events -= 1
                        piece = piece[:room]  # `room` characters are at least `room` bytes
                        room -= len(piece.encode("utf-8"))
                        yield piece
                if not done:
                    raise BackendError(f"vllm: {ep.url} ended the stream without [DONE] (truncated answer)")
            finally:
                # Closing an unfinished streamed response drops the connection: vLLM aborts the request.
                await resp.aclose()
        finally:
            ep.in_flight -= 1


async def _sse_lines(resp: httpx.Response, url: str) -> AsyncGenerator[str, None]:
    """The lines of an event stream, none longer than MAX_SSE_LINE_BYTES (httpx's own line reader buffers an
    endless line without limit)."""
    buf = bytearray()
    async for chunk in resp.aiter_bytes():
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            buf += chunk[start:] if end < 0 else chunk[start:end]
            if len(buf) > MAX_SSE_LINE_BYTES:
                raise BackendError(f"vllm: malformed stream from {url}: a line longer than "
                                   f"{MAX_SSE_LINE_BYTES} bytes")
            if end < 0:
                break
            line = buf.decode("utf-8", "replace")
            buf.clear()
            start = end + 1
            yield line
    if buf:
        yield buf.decode("utf-8", "replace")


async def _read_upto(resp: httpx.Response, limit: int) -> tuple[bytes, bool]:
    """The body's first `limit` bytes at most, and whether there was more (the rest is never read)."""
    buf = bytearray()
    async for chunk in resp.aiter_bytes():
        buf += chunk
        if len(buf) > limit:
            return bytes(buf[:limit]), True
    return bytes(buf), False


def _parse_sse_line(line: str, url: str) -> tuple[str, bool]:
    """(text piece, stream finished) for one line of an OpenAI-style completion event stream."""
    line = line.strip()
    if not line or line.startswith(":"):
        return "", False  # blank separator or SSE comment (keep-alive)
    if line.startswith(("event:", "id:", "retry:")):
        return "", False
    if not line.startswith("data:"):
        raise BackendError(f"vllm: malformed stream from {url}: expected 'data:' lines, got {line[:120]!r}")
    data = line[len("data:") :].strip()
    if data == "[DONE]":
        return "", True
    try:
        event = json.loads(data)
    except ValueError:
        raise BackendError(f"vllm: malformed stream from {url}: not JSON: {data[:120]!r}") from None
    if not isinstance(event, dict):
        raise BackendError(f"vllm: malformed stream from {url}: unexpected event {data[:120]!r}")
    if "error" in event:
        raise BackendError(f"vllm: {url} reported an error mid-stream: {_error_message(json.dumps(event))}")
    try:
        choice = event["choices"][0]
        text = choice.get("text") or ""
        if not isinstance(text, str):
            raise TypeError
    except (KeyError, IndexError, TypeError, AttributeError):
        raise BackendError(f"vllm: malformed stream from {url}: event without choices[0].text: {data[:120]!r}") from None
    return text, False


def _error_message(body: str) -> str:
    """The server's own words from an OpenAI-style error body, else the body's start."""
    try:
        obj = json.loads(body)
        err = obj.get("error", obj) if isinstance(obj, dict) else obj
        if isinstance(err, dict) and "message" in err:
            return str(err["message"])[:300]
        if isinstance(obj, dict) and "message" in obj:
            return str(obj["message"])[:300]
    except ValueError:
        pass
    return body.strip()[:300] or "(empty body)"
