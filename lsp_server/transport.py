"""Where the server's bytes come from and go to: stdio (what editors start) or one TCP client.

Both run `lsp_server.framing.FrameReader` and `RepocompProtocol.handle_body` in place of pygls' message loop
(`pygls.io_.run_async`; see those modules for why) until the protocol records `exit` (or the input ends), and
return the LSP exit code. The transport knows the protocol, not the server: it is handed what to call when a
session ends without `shutdown` (`finish`: close engines and indexes) and once it is over (`close`).

On stdio the protocol owns stdout: `claim_stdout` moves the real stdout to a private descriptor used only for
frames and points fd 1 (and so `print`, C extensions and child processes) at stderr.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, BinaryIO

from pygls.io_ import StdoutWriter

from lsp_server.framing import CHUNK_BYTES, FrameReader, ReadChunk
from lsp_server.protocol import RepocompProtocol

Finish = Callable[[], Awaitable[None]]  # closes engines and indexes when a session ends without `shutdown`

logger = logging.getLogger(__name__)

FINISH_TIMEOUT_S = 10.0  # closing engines and indexes after `exit` without `shutdown`, or the end of input


def claim_stdout() -> BinaryIO:
    """A private handle on stdout for protocol frames; fd 1 then writes to stderr."""
    sys.stdout.flush()
    private = os.dup(sys.stdout.fileno())
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    return os.fdopen(private, "wb")


def serve_stdio(protocol: RepocompProtocol, *, finish: Finish, close: Callable[[], None],
                stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> int:
    """Serve one session on stdio until `exit` or the end of input; returns the exit code."""
    source = stdin or sys.stdin.buffer
    read1: Callable[[int], bytes] = getattr(source, "read1", source.read)
    protocol.set_writer(StdoutWriter(stdout or claim_stdout()))
    # its own thread: a busy shared pool must never delay reading (and with it `$/cancelRequest`)
    reading = ThreadPoolExecutor(max_workers=1, thread_name_prefix="repocomp-lsp-stdin")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        await _session(protocol, finish, lambda: loop.run_in_executor(reading, read1, CHUNK_BYTES))

    def after() -> None:
        reading.shutdown(wait=False)
        close()

    return _run(protocol, main, after)


def serve_tcp(protocol: RepocompProtocol, host: str, port: int, *, finish: Finish, close: Callable[[], None]) -> int:
    """Serve the first client that connects to host:port, until `exit` or it disconnects; returns the exit code."""

    async def main() -> None:
        done = asyncio.get_running_loop().create_future()

        async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            if done.done():
                writer.close()  # one client per server
                return
            protocol.set_writer(writer)
            try:
                await _session(protocol, finish, lambda: reader.read(CHUNK_BYTES))
            finally:
                writer.close()
                if not done.done():
                    done.set_result(None)

        listener = await asyncio.start_server(connection, host, port)
        logger.info("serving on %s", ", ".join(str(s.getsockname()) for s in listener.sockets))
        async with listener:
            await done

    return _run(protocol, main, close)


async def _session(protocol: RepocompProtocol, finish: Finish, read_chunk: ReadChunk) -> None:
    frames = FrameReader(read_chunk)
    while protocol.exit_code is None:
        body = await frames.read_body()
        if body is None:
            logger.info("end of input: the client is gone")
            break
        protocol.handle_body(body)
    if not protocol.shutdown_received:  # `exit` without `shutdown`, or the client vanished
        try:
            await asyncio.wait_for(finish(), FINISH_TIMEOUT_S)
        except Exception:
            logger.warning("closing engines and indexes failed", exc_info=True)


def _run(protocol: RepocompProtocol, main: Callable[[], Coroutine[Any, Any, None]], after: Callable[[], None]) -> int:
    try:
        asyncio.run(main())
    except BrokenPipeError:
        logger.error("the connection to the client is lost; shutting down")
    except KeyboardInterrupt:
        pass
    finally:
        after()  # the server's thread pool
    code = protocol.exit_code
    return 0 if code is None else code  # the end of input without `exit`: not an error of ours
