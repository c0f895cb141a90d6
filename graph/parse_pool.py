"""Many source files parsed in worker processes (a build, or one of its batches).

Tree-sitter's parse and its queries hold the interpreter's lock, so threads parse one file at a time (measured:
two threads no faster than one); processes parse side by side. A parsed file is plain data (arrays, strings,
tuples), pickled back in about 2% of its parse time.

The workers are this module run as a program (`python -m graph.parse_pool`: it imports the parser only), fed
over pipes, not `multiprocessing`'s: that re-runs the caller's main script in each worker (a script without a
`__main__` guard would start its work again there) or forks a process whose other threads may hold locks (the
language server's).
"""

from __future__ import annotations

import contextlib
import logging
import pickle
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from graph.parsing import ParsedFile, parse_source

log = logging.getLogger(__name__)

POOL_CHARS = 4 << 20  # source below this (a few seconds of parsing; an editor's save) is parsed in-process
CHUNK_CHARS = 1 << 20  # source sent to a worker at once (about 0.2 s of parsing)
_HEADER = struct.Struct("<Q")

Source = tuple[str, str]  # (text, language)


def parsed_files(sources: list[Source], workers: int) -> Iterator[ParsedFile]:
    """`parse_source(text, language)` of each of `sources`, in order: in `workers` processes where there are two or
    more and the source is large. Workers that cannot start or stop (one killed) are said once and the rest is
    parsed here: nothing is lost."""
    done = 0
    if workers > 1 and sys.executable and sum(len(text) for text, _ in sources) >= POOL_CHARS:
        try:
            for parsed in _pooled(sources, workers):
                yield parsed
                done += 1
        except (OSError, EOFError, pickle.UnpicklingError, struct.error) as exc:
            log.warning("parsing in this process: the parse workers stopped (%s)", exc or type(exc).__name__)
    for text, language in sources[done:]:
        yield parse_source(text, language)


def _chunks(sources: list[Source]) -> list[list[Source]]:
    out: list[list[Source]] = [[]]
    size = 0
    for source in sources:
        if out[-1] and size + len(source[0]) > CHUNK_CHARS:
            out.append([])
            size = 0
        out[-1].append(source)
        size += len(source[0])
    return out


def _pooled(sources: list[Source], workers: int) -> Iterator[ParsedFile]:
    """The chunks of `sources` dealt to the workers in turn (each fed by a thread of its own, so that a worker
    blocked writing a result never blocks the feeding of another), their results read back in order."""
    chunks = _chunks(sources)
    workers = min(workers, len(chunks))
    # run from the folder that holds this package: `-m` puts the working folder first on the import path, and
    # that may be a repository being indexed (its files are never run)
    home = str(Path(__file__).resolve().parents[1])
    procs: list[subprocess.Popen[bytes]] = []
    feeders: list[threading.Thread] = []
    try:
        for _ in range(workers):
            procs.append(subprocess.Popen([sys.executable, "-m", "graph.parse_pool"], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, cwd=home))
        for w, p in enumerate(procs):
            assert p.stdin is not None  # (piped)
            feeders.append(threading.Thread(target=_feed, args=(p.stdin, chunks[w::workers]), daemon=True))
            feeders[-1].start()
        for n, chunk in enumerate(chunks):
            stdout = procs[n % workers].stdout
            assert stdout is not None  # (piped)
            results = _read(stdout)
            for parsed, (text, language) in zip(results, chunk):
                # a file the worker could not parse is parsed here, so that its error is this process's
                yield _interned(parsed) if parsed is not None else parse_source(text, language)
    finally:
        for p in procs:
            p.kill()  # done, or a caller that stopped early: the queued chunks are not parsed
        for feeder in feeders:  # its writes fail at once now
            feeder.join(10)
        for p in procs:
            p.wait()
            for pipe in (p.stdin, p.stdout):
                if pipe is not None:
                    with contextlib.suppress(OSError, ValueError):  # what a stopped worker's pipe held unsent
                        pipe.close()


def _feed(stdin: IO[bytes], chunks: list[list[Source]]) -> None:
    try:
        for chunk in chunks:
            _write(stdin, chunk)
        stdin.close()
    except (OSError, ValueError):  # the worker was stopped (its pipe broken or closed): the reader says so
        pass


def _write(pipe: IO[bytes], value: Any) -> None:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    pipe.write(_HEADER.pack(len(data)) + data)
    pipe.flush()


def _read(pipe: IO[bytes]) -> Any:
    """One message; EOFError where the other side stopped. Only this module's own processes write these pipes."""
    header = pipe.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise EOFError("a parse worker ended")
    (size,) = _HEADER.unpack(header)
    data = pipe.read(size)
    if len(data) < size:
        raise EOFError("a parse worker ended")
    return pickle.loads(data)


def _interned(parsed: ParsedFile) -> ParsedFile:
    """The names as an in-process parse leaves them, one object per distinct string across files (unpickled, each
    chunk has its own copies: 1.8 million call sites in a monorepo)."""
    parsed.kinds = [sys.intern(kind) for kind in parsed.kinds]
    same: dict[int, tuple[str, ...]] = {}  # the tuples a file shares between equal callees stay shared
    for parts in parsed.call_parts:
        if id(parts) not in same:
            same[id(parts)] = tuple(map(sys.intern, parts))
    parsed.call_parts = [same[id(parts)] for parts in parsed.call_parts]
    return parsed


def _serve() -> None:
    """A worker: each chunk read from stdin answered on stdout with its parses (None for a file that raised)."""
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing else may write into the results
    while True:
        try:
            chunk = _read(stdin)
        except EOFError:
            return
        out: list[ParsedFile | None] = []
        for text, language in chunk:
            try:
                out.append(parse_source(text, language))
            except Exception:  # noqa: BLE001 - the caller parses it again and gets the error itself
                out.append(None)
        _write(stdout, out)


if __name__ == "__main__":
    _serve()
