"""Where the server's bytes come from and go to: stdio (what editors start) or one TCP client.

Both run `lsp_server.framing.FrameReader` and `RepocompProtocol.handle_body` in place of pygls' message loop
(`pygls.io_.run_async`; see those modules for why) and return the LSP exit code.

On stdio the protocol owns stdout: `claim_stdout` moves the real stdout to a private descriptor used only for
frames and points fd 1 (and so `print`, C extensions and child processes) at stderr.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, BinaryIO

from pygls.io_ import StdoutWriter

from lsp_server.framing import CHUNK_BYTES, FrameReader, ReadChunk

if TYPE_CHECKING:
    from lsp_server.server import RepocompServer

logger = logging.getLogger(__name__)

FINISH_TIMEOUT_S = 10.0  # closing engines and indexes after `exit` without `shutdown`, or the end of input


def claim_stdout() -> BinaryIO:
    """A private handle on stdout for protocol frames; fd 1 then writes to stderr."""
    sys.stdout.flush()
    private = os.dup(sys.stdout.fileno())
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    return os.fdopen(private, "wb")


def serve_stdio(server: RepocompServer, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> int:
    """Serve one session on stdio until `exit` or the end of input; returns the exit code."""
    source = stdin or sys.stdin.buffer
    read1: Callable[[int], bytes] = getattr(source, "read1", source.read)
    server.protocol.set_writer(StdoutWriter(stdout or claim_stdout()))
    # its own thread: a busy shared pool must never delay reading (and with it `$/cancelRequest`)
    reading = ThreadPoolExecutor(max_workers=1, thread_name_prefix="repocomp-lsp-stdin")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        await _session(server, lambda: loop.run_in_executor(reading, read1, CHUNK_BYTES))

    return _run(server, main, after=lambda: reading.shutdown(wait=False))


def serve_tcp(server: RepocompServer, host: str, port: int) -> int:
    """Serve the first client that connects to host:port, until `exit` or it disconnects; returns the exit code."""

    async def main() -> None:
        done = asyncio.get_running_loop().create_future()

        async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            if done.done():
                writer.close()  # one client per server
                return
            server.protocol.set_writer(writer)
            try:
                await _session(server, lambda: reader.read(CHUNK_BYTES))
            finally:
                writer.close()
                if not done.done():
                    done.set_result(None)

        listener = await asyncio.start_server(connection, host, port)
        logger.info("serving on %s", ", ".join(str(s.getsockname()) for s in listener.sockets))
        async with listener:
            await done

    return _run(server, main)


async def _session(server: RepocompServer, read_chunk: ReadChunk) -> None:
    stop = server._stop_event
    assert stop is not None
    frames = FrameReader(read_chunk)
    while not stop.is_set():
        body = await frames.read_body()
        if body is None:
            logger.info("end of input: the client is gone")
            break
        server.protocol.handle_body(body)
    if not server.protocol.shutdown_received:  # `exit` without `shutdown`, or the client vanished
        try:
            await asyncio.wait_for(server.shutdown_all(), FINISH_TIMEOUT_S)
        except Exception:
            logger.warning("closing engines and indexes failed", exc_info=True)


def _run(server: RepocompServer, main: Callable[[], Coroutine[Any, Any, None]], after: Callable[[], None] | None = None) -> int:
    server._stop_event = threading.Event()
    try:
        asyncio.run(main())
    except BrokenPipeError:
        logger.error("the connection to the client is lost; shutting down")
    except KeyboardInterrupt:
        pass
    finally:
        if after is not None:
            after()
        server.shutdown()  # pygls: its thread pool
    code = server.protocol.exit_code
    return 0 if code is None else code  # the end of input without `exit`: not an error of ours
