"""A slow LLM endpoint speaking the OpenAI `/v1/completions` streaming API, for `repocomp bench typing` and the
editor tests: it takes `latency_s` per generation (a third before the first piece, the rest spread over the
pieces, as prefill then decoding) and counts generations started, finished and abandoned by the client.

It writes what the file being typed really says next (an oracle model): the prompt's last characters are looked
up in `source` and the rest of that line is the answer. Drafts therefore match what the user goes on typing;
with a real model they match less often (README: the replay's figures say which backend they used).

Use it as `[backend] name = "vllm"`, `model = "slow"` and `[backend.vllm] endpoints = [SlowBackend.url]`.
"""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass

PIECE_CHARS = 4  # characters per streamed event (about a token)


@dataclass
class Counts:
    started: int = 0
    finished: int = 0
    abandoned: int = 0  # the client went away before the end (a cancelled generation)


class SlowBackend:
    """The endpoint on 127.0.0.1 in a thread of its own (`start`/`stop`), or on a running loop (`serve`)."""

    def __init__(self, source: str, latency_s: float = 1.5) -> None:
        self.source = source
        self.latency_s = latency_s
        self.counts = Counts()
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None

    def answer(self, prompt: str) -> str:
        """The rest of the source line after the prompt's last characters (found in `source`), newline included."""
        for n in (300, 120, 40, 12):
            tail = prompt[-n:]
            at = self.source.find(tail)
            if len(tail) == n and at >= 0:
                rest = self.source[at + n:]
                end = rest.find("\n")
                return rest if end < 0 else rest[: end + 1]
        return "None\n"

    # ---- serving ----------------------------------------------------------------------------------------

    async def serve(self) -> str:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self.url

    def start(self) -> str:
        ready = threading.Event()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(self.serve())
            ready.set()
            self._loop.run_forever()
            self._loop.close()

        self._thread = threading.Thread(target=run, name="slow-backend", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the slow backend did not start")
        return self.url

    def stop(self) -> None:
        if self._loop is not None and self._server is not None and self._loop.is_running():
            try:  # connections still open (a client that never closed) end first, so no task dies pending
                asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(5)
            finally:
                self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(5)

    async def _close(self) -> None:
        assert self._server is not None
        self._server.close()
        handlers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            request_line, *header_lines = head.decode("latin-1").split("\r\n")
            headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines if h)}
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            if request_line.startswith("GET /v1/models"):
                await _send(writer, "application/json", json.dumps({"data": [{"id": "slow"}]}).encode())
            elif request_line.startswith("POST /v1/completions"):
                await self._complete(json.loads(body), reader, writer)
            else:
                await _send(writer, "text/plain", b"not found", status="404 Not Found")
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()

    async def _complete(self, payload: dict, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.counts.started += 1
        text = self.answer(str(payload.get("prompt", "")))
        pieces = [text[i:i + PIECE_CHARS] for i in range(0, len(text), PIECE_CHARS)] or [""]
        gone = asyncio.ensure_future(reader.read())  # b"" when the client closes the connection: it gave up
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
        delays = [self.latency_s / 3] + [self.latency_s * 2 / 3 / len(pieces)] * (len(pieces) - 1)
        try:
            for piece, delay in zip(pieces, delays):
                await asyncio.wait([gone], timeout=delay)
                if gone.done():
                    self.counts.abandoned += 1
                    return
                event = {"choices": [{"index": 0, "text": piece, "finish_reason": None}]}
                writer.write(f"data: {json.dumps(event)}\n\n".encode())
                await writer.drain()
            writer.write(b"data: [DONE]\n\n")
            await writer.drain()
            self.counts.finished += 1
        except ConnectionError:
            self.counts.abandoned += 1
        finally:
            gone.cancel()


async def _send(writer: asyncio.StreamWriter, ctype: str, body: bytes, status: str = "200 OK") -> None:
    writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                 f"Connection: close\r\n\r\n".encode() + body)
    await writer.drain()
