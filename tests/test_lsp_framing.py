"""The header caps of the LSP framing (`lsp_server.framing`): an over-long header line or too many header lines is
rejected, the reader holds at most about one line's cap plus a chunk of it meanwhile, and the next frame is read.
(The real server over TCP meets the same frames in test_lsp_lifecycle.py.)"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from lsp_server.framing import CHUNK_BYTES, MAX_HEADER_LINE_BYTES, MAX_HEADER_LINES, FrameReader


def frame(body: bytes) -> bytes:
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def read_all(pieces: Iterator[bytes], timeout_s: float = 30.0) -> tuple[list[bytes], int, int]:
    """The bodies read from the stream, the most bytes the reader held at once, and the frames it skipped."""
    held = 0

    async def run() -> tuple[list[bytes], FrameReader]:
        reader: FrameReader

        async def read_chunk() -> bytes:
            nonlocal held
            held = max(held, len(reader._buf))
            return next(pieces, b"")

        reader = FrameReader(read_chunk)
        bodies = []
        while (body := await reader.read_body()) is not None:
            bodies.append(body)
        return bodies, reader

    bodies, reader = asyncio.run(asyncio.wait_for(run(), timeout_s))
    return bodies, held, reader.skipped


def chunks(data: bytes) -> Iterator[bytes]:
    for i in range(0, len(data), CHUNK_BYTES):
        yield data[i : i + CHUNK_BYTES]


def test_an_over_long_header_line_is_dropped_in_bounded_memory() -> None:
    def stream() -> Iterator[bytes]:
        yield from chunks(frame(b"[1]"))
        yield b"Content-Length: 2\r\nX-Long: "
        for _ in range(50 * 1024 * 1024 // CHUNK_BYTES):  # a 50 MiB header line, never whole in memory
            yield b"a" * CHUNK_BYTES
        yield b"\r\n\r\n{}"
        yield from chunks(frame(b"[2]"))

    bodies, held, skipped = read_all(stream())
    assert bodies == [b"[1]", b"[2]"] and skipped == 1
    assert held <= MAX_HEADER_LINE_BYTES + 2 * CHUNK_BYTES, held


def test_a_line_just_over_the_cap_is_rejected_and_one_at_the_cap_is_not() -> None:
    at_cap = b"X-Pad: " + b"p" * (MAX_HEADER_LINE_BYTES - len(b"X-Pad: \r\n")) + b"\r\n"
    assert len(at_cap) == MAX_HEADER_LINE_BYTES
    over = at_cap[:-2] + b"p\r\n"
    stream = b"Content-Length: 3\r\n" + at_cap + b"\r\n[1]" + b"Content-Length: 3\r\n" + over + b"\r\n[x]" + frame(b"[2]")
    bodies, _, skipped = read_all(chunks(stream))
    assert bodies == [b"[1]", b"[2]"] and skipped == 1


def test_too_many_header_lines_are_rejected() -> None:
    allowed = b"".join(b"X-Pad-%d: 1\r\n" % i for i in range(MAX_HEADER_LINES - 1))
    too_many = b"".join(b"X-Pad-%d: 1\r\n" % i for i in range(10 * MAX_HEADER_LINES))
    stream = (b"Content-Length: 3\r\n" + allowed + b"\r\n[1]"  # the cap counts Content-Length too
              + b"Content-Length: 3\r\n" + too_many + b"\r\n[x]" + frame(b"[2]"))
    bodies, held, skipped = read_all(chunks(stream))
    assert bodies == [b"[1]", b"[2]"] and skipped == 1
    assert held <= len(stream)


def test_an_endless_stream_of_short_header_lines_is_read_in_bounded_memory() -> None:
    def stream() -> Iterator[bytes]:
        yield b"Content-Length: 2\r\n"
        line = b"X-Pad: 1\r\n"
        for _ in range(500):  # 30 MiB of header lines
            yield line * (CHUNK_BYTES // len(line))
        yield b"\r\n{}"
        yield frame(b"[2]")

    bodies, held, skipped = read_all(stream())
    assert bodies == [b"[2]"] and skipped == 1
    assert held <= MAX_HEADER_LINE_BYTES + 2 * CHUNK_BYTES, held
