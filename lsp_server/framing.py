"""LSP base-protocol framing (`Content-Length` headers, then a body) that survives hostile or broken input.

Why ours and not pygls' reader: pygls 2.x (`pygls.io_.run_async`) reads headers with an unbounded `readline`,
reads whatever `Content-Length` says in one piece (`Content-Length: 1000000000000` is a MemoryError that ends the
process), and after a frame without a valid `Content-Length` it never finds its way back, so every later request
goes unanswered. pygls has no option for any of this, so the server runs this reader instead:

- every header line and every body is bounded (`MAX_HEADER_LINE_BYTES`, `MAX_MESSAGE_BYTES`);
- a malformed frame (a line that is not a header, a missing or non-numeric `Content-Length`, a body over the cap)
  is logged and skipped: the reader drops bytes up to the next `Content-Length:` and starts over there, keeping
  at most one chunk in memory, so a 1 TB declared body costs nothing and a real one is streamed past;
- a body cut short or run long by a wrong `Content-Length` is handed on as is (the dispatcher answers it with
  a ParseError) and the bytes left over are resynchronised like any malformed frame.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable

logger = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # one body; an editor's largest (didOpen of a huge file) is far below this
MAX_HEADER_LINE_BYTES = 8 * 1024
MAX_HEADER_LINES = 32
CHUNK_BYTES = 64 * 1024
MARKER = b"Content-Length:"
_HEADER = re.compile(rb"([!#$%&'*+\-.^_`|~0-9A-Za-z]+):[ \t]*(.*?)[ \t]*\r?\n")

ReadChunk = Callable[[], Awaitable[bytes]]  # returns b"" at end of input


class MalformedFrame(Exception):
    """The bytes at the read position are not a valid frame."""


class FrameReader:
    """Yields message bodies from a byte stream, skipping malformed frames (see the module docstring)."""

    def __init__(self, read_chunk: ReadChunk, max_message_bytes: int = MAX_MESSAGE_BYTES) -> None:
        self._read_chunk = read_chunk
        self.max_message_bytes = max_message_bytes
        self._buf = bytearray()
        self._eof = False
        self.skipped = 0  # malformed frames seen (for logs and tests)

    async def read_body(self) -> bytes | None:
        """The next frame's body (possibly not JSON: the caller answers that); None at the end of input."""
        while True:
            try:
                return await self._read_frame()
            except MalformedFrame as exc:
                self.skipped += 1
                logger.warning("malformed LSP frame (%s); skipping to the next Content-Length header", exc)
                if not await self._resync():
                    return None

    async def _read_frame(self) -> bytes | None:
        length: int | None = None
        headers = 0
        while True:
            line = await self._peek_line()
            if line is None:
                return None
            if line.strip() == b"":
                self._consume(len(line))
                if headers == 0:
                    continue  # a stray blank line between frames
                if length is None:
                    raise MalformedFrame("no Content-Length header")
                break
            match = _HEADER.fullmatch(line)
            inner = line.find(MARKER, 1)
            if match is None or inner > 0:
                self._consume(inner if inner > 0 else len(line))  # a frame may start inside the broken line
                raise MalformedFrame(f"not a header: {line[:60]!r}")
            self._consume(len(line))
            headers += 1
            if headers > MAX_HEADER_LINES:
                raise MalformedFrame("too many header lines")
            if match.group(1).lower() == b"content-length":
                value = match.group(2)
                if not value.isdigit():
                    raise MalformedFrame(f"Content-Length is not a number: {bytes(value[:30])!r}")
                if len(value) > 18 or int(value) > self.max_message_bytes:
                    raise MalformedFrame(f"Content-Length {value[:20].decode()} is over the "
                                         f"{self.max_message_bytes} byte limit; the body is dropped")
                length = int(value)
        return await self._read_exactly(length)

    async def _fill(self) -> bool:
        """Append one chunk to the buffer; False at the end of input."""
        if self._eof:
            return False
        chunk = await self._read_chunk()
        if not chunk:
            self._eof = True
            return False
        self._buf += chunk
        return True

    async def _peek_line(self) -> bytes | None:
        """The line at the read position (through its newline), not consumed; None at the end of input."""
        scanned = 0
        while True:
            end = self._buf.find(b"\n", scanned)
            if end >= 0:
                if end + 1 > MAX_HEADER_LINE_BYTES:
                    self._drop_long_line()
                return bytes(self._buf[: end + 1])
            if len(self._buf) > MAX_HEADER_LINE_BYTES:
                self._drop_long_line()
            scanned = len(self._buf)
            if not await self._fill():
                return None  # a partial line at the end of input is dropped

    def _drop_long_line(self) -> None:
        if self._buf.startswith(MARKER):
            self._consume(len(MARKER))  # its own marker must not be found again; later ones may be
        raise MalformedFrame("header line too long")

    def _consume(self, n: int) -> None:
        del self._buf[:n]

    async def _read_exactly(self, n: int) -> bytes | None:
        while len(self._buf) < n:
            if not await self._fill():
                return None
        body = bytes(self._buf[:n])
        self._consume(n)
        return body

    async def _resync(self) -> bool:
        """Drop bytes up to the next `Content-Length:`; False at the end of input.

        Every `MalformedFrame` is raised after the rejected bytes were consumed, so this always makes progress.
        """
        while True:
            at = self._buf.find(MARKER)
            if at >= 0:
                self._consume(at)
                return True
            self._consume(max(0, len(self._buf) - (len(MARKER) - 1)))  # keep a marker split across chunks
            if not await self._fill():
                return False
