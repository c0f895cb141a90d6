"""The index on disk: one versioned file of plain data, written atomically. Reading it can never run code.

Layout: a magic line, a format-version line, the byte length of a JSON header on its own line, the JSON header
(`{"meta": {...}, "arrays": [names...]}`), then one `.npy` record per named array, in that order, each starting
at a multiple of `ALIGN` bytes (zeros between). Arrays are read with their headers checked first: only
bool/int/uint/float dtypes, and never more bytes than the file holds, so a crafted file costs at most its own size.
There is no pickle anywhere (format 1 was a pickle; a repository could ship one that ran code when unpickled).

Arrays are read in place: each is a copy-on-write view of a memory map of the file (aligned records make them
aligned arrays), so what is resident is what has been touched, and a write to one (an update) copies only the
pages it writes; the file is never written through them. `page_out` returns the pages touched (checking a file
as it is read, comparing the texts with the disk) to the kernel. A replaced index file stays readable by the
views of the old one (a rename keeps the old file until its map is dropped); a file truncated in place under a
running reader is not (SIGBUS), which no writer here does.

The file is written to a temporary name in the same folder, fsynced, then renamed over the old one, so a crash
mid-write leaves the previous index loadable. Temporary files of a write that was killed are removed by the next
write or open once they are `STALE_TMP_S` old. Reading translates every failure where it happens: no file is
`IndexMissingError`, another format version `IndexStaleError`, anything damaged or unreadable `IndexCorruptError`
(never a raw OSError/ValueError/numpy error).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import mmap
import os
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.lib.format as npy

from repocomp.config.paths import user_cache_dir
from repocomp.errors import (
    IndexCorruptError,
    IndexMissingError,
    IndexStaleError,
    IndexUntrustedError,
    IndexUnusableError,
    RepocompError,
)
from repocomp.index.yielding import checkpoint, spans

MAGIC = b"repocomp-index\n"
FORMAT_VERSION = 3
INDEX_FILE = "index.bin"
REJECTED_SUFFIX = ".rejected"  # a rejected index file, set aside under its name plus this
TMP_PREFIX, TMP_SUFFIX = ".index-", ".tmp"
# a temporary file untouched this long belongs to a write that died (a live write touches it constantly)
STALE_TMP_S = 600.0
_ARRAY_KINDS = "biuf"  # bool, int, uint, float: dtypes that are plain bytes
_MAX_HEADER_BYTES = 1 << 31
ALIGN = 64  # each array record starts at a multiple of this (numpy pads its headers to it too)
_MADV_PAGEOUT = getattr(mmap, "MADV_PAGEOUT", 21)  # Linux 5.4's value; Python 3.11's mmap does not name it


class Chunks:
    """A 1-D array written piece by piece, never whole in memory: its dtype, its length and a function that gives
    its pieces in order (arrays or bytes of that dtype)."""

    def __init__(self, dtype: Any, length: int | Callable[[], int],
                 pieces: Callable[[], Iterable[np.ndarray | bytes]]) -> None:
        self.dtype, self._length, self.pieces = np.dtype(dtype), length, pieces

    @property
    def length(self) -> int:
        """Its length (counted when first asked, where that takes a pass of its own)."""
        if callable(self._length):
            self._length = self._length()
        return self._length

    def whole(self) -> np.ndarray:
        parts = [np.frombuffer(p, self.dtype) if isinstance(p, bytes) else p for p in self.pieces()]
        return np.concatenate(parts).astype(self.dtype, copy=False) if parts else np.zeros(0, self.dtype)


# what an index file stores under a name: an array, a function that makes it when it is written (and lets it go
# after), or its pieces: a write holds one large table at a time, not all of them
Stored = np.ndarray | Callable[[], np.ndarray] | Chunks


def whole(value: Stored) -> np.ndarray:
    """The array `value` stands for, made whole."""
    if isinstance(value, Chunks):
        return value.whole()
    return value() if callable(value) else value


def write_state(folder: Path, meta: dict[str, Any], arrays: dict[str, Stored]) -> Path:
    """Write `meta` (JSON-able) and `arrays` as the index file of `folder`; returns its path.

    Raises `RepocompError` when `folder` or the index file exists as something else; `PermissionError` and
    other `OSError`s when the folder cannot be written (the caller may fall back to another folder).
    """
    return write_mapped(folder, meta, arrays)[0]


def write_mapped(folder: Path, meta: dict[str, Any], arrays: dict[str, Stored]
                 ) -> tuple[Path, dict[str, np.ndarray]]:
    """`write_state`, and the arrays as `read_state` would read them back: views of a map of the file just written
    (mapped before it is renamed into place, so they are this write's even if another process replaces the file
    at once)."""
    target = folder / INDEX_FILE
    if folder.exists() and not folder.is_dir():
        raise RepocompError(f"{folder} is a file, not a folder; remove it or set [index] dir to another folder")
    folder.mkdir(parents=True, exist_ok=True)
    try:
        mode = target.lstat().st_mode
    except FileNotFoundError:
        mode = stat.S_IFREG
    # a symbolic link is replaced by the rename below, never written through
    if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        raise RepocompError(f"{target} is not a regular file; remove it so the index can be written there")
    remove_stale_tmp(folder)
    header = "".join(_json_pieces({"meta": meta, "arrays": list(arrays)})).encode()
    fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, suffix=TMP_SUFFIX, dir=folder)
    placed: dict[str, tuple[int, np.dtype, tuple[int, ...]]] = {}  # name -> where its data starts, dtype, shape
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(MAGIC + f"{FORMAT_VERSION}\n{len(header)}\n".encode() + header)
            for name, value in arrays.items():  # a table made for the write goes once written
                checkpoint()
                placed[name] = _write_array(fh, value)
            fh.flush()
            checkpoint()
            os.fsync(fh.fileno())
            checkpoint()
            mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    checkpoint()
    return target, {name: _view(mapped, at, dtype, shape) for name, (at, dtype, shape) in placed.items()}


def _json_pieces(value: Any, slice_len: int = 1024) -> Iterator[str]:
    """`value` as compact JSON, large lists and dictionaries a slice at a time: one call of the C encoder holds the
    interpreter's lock for the whole of it (330 ms for a monorepo's index header, while the language server's
    requests waited); Python's own encoder lets go of it but leaves reference cycles behind."""
    if isinstance(value, dict) and len(value) <= slice_len:
        yield "{"
        for i, (key, item) in enumerate(value.items()):
            yield ("," if i else "") + json.dumps(str(key)) + ":"
            yield from _json_pieces(item, slice_len)
        yield "}"
    elif isinstance(value, list | dict) and len(value) > slice_len:
        items = list(value.items()) if isinstance(value, dict) else value
        yield "{" if isinstance(value, dict) else "["
        for i in range(0, len(items), slice_len):
            checkpoint()
            part = dict(items[i:i + slice_len]) if isinstance(value, dict) else items[i:i + slice_len]
            yield ("," if i else "") + json.dumps(part, separators=(",", ":"))[1:-1]
        yield "}" if isinstance(value, dict) else "]"
    else:
        yield json.dumps(value, separators=(",", ":"))


def _write_array(fh: Any, value: Stored) -> tuple[int, np.dtype, tuple[int, ...]]:
    """One `.npy` record at the next aligned offset; where its data starts, its dtype and shape."""
    fh.write(bytes(-fh.tell() % ALIGN))
    if isinstance(value, Chunks):
        _check_storable(value.dtype)
        npy.write_array_header_1_0(fh, {"descr": npy.dtype_to_descr(value.dtype), "fortran_order": False,
                                        "shape": (value.length,)})
        start = fh.tell()
        for piece in value.pieces():
            _write_data(fh, piece, value.dtype)
        if fh.tell() - start != value.length * value.dtype.itemsize:  # a schema bug: the pieces do not add up
            raise ValueError(f"pieces of {value.length} x {value.dtype} expected, {fh.tell() - start} bytes written")
        return start, value.dtype, (value.length,)
    arr = np.ascontiguousarray(value() if callable(value) else value)
    _check_storable(arr.dtype)
    npy.write_array_header_1_0(fh, npy.header_data_from_array_1_0(arr))
    start = fh.tell()
    _write_data(fh, arr, arr.dtype)
    return start, arr.dtype, arr.shape


_WRITE_BYTES = 4 << 20  # written this much at a time, a checkpoint between


def _write_data(fh: Any, data: np.ndarray | bytes, dtype: np.dtype) -> None:
    """`data` (an array, or bytes of `dtype`) as `dtype`, `_WRITE_BYTES` at a time with a checkpoint between: a
    save beside the language server's requests wrote a table's piece of up to 64 MB between two checkpoints (a
    slice of 80-330 ms of CPU, mostly the kernel's, with the page cache cold)."""
    flat = np.frombuffer(data, dtype) if isinstance(data, bytes) else np.asarray(data).reshape(-1)
    for part in spans(len(flat), max(1, _WRITE_BYTES // dtype.itemsize)):
        fh.write(np.ascontiguousarray(flat[part], dtype).data)


def _check_storable(dtype: np.dtype) -> None:
    if dtype.kind not in _ARRAY_KINDS:  # a schema bug, not user input
        raise TypeError(f"cannot store dtype {dtype}")


def read_state(folder: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(meta, arrays) of the index file of `folder`.

    `IndexMissingError` when there is none, `IndexStaleError` for another format version, `IndexUntrustedError`
    when it is a symbolic link (whatever it points to is not this folder's index, and is never opened),
    `IndexCorruptError` for anything else that cannot be read (each message names the file).
    """
    target = folder / INDEX_FILE
    try:
        st = target.lstat()
    except (FileNotFoundError, NotADirectoryError):
        raise IndexMissingError(f"no index at {folder} yet: run `repocomp index <repo>` to build one") from None
    except OSError as exc:
        raise IndexCorruptError(f"{target} cannot be read ({exc.strerror or type(exc).__name__}); "
                                "run `repocomp index` to rebuild it") from None
    if stat.S_ISLNK(st.st_mode):
        raise IndexUntrustedError(f"{target} is a symbolic link, not an index file of its own", target)
    if not stat.S_ISREG(st.st_mode):
        raise IndexCorruptError(f"{target} is not a regular file; remove it and run `repocomp index`")
    remove_stale_tmp(folder)
    try:
        with _opened(target) as (fh, size):
            return _read(fh, target, size)
    except IndexUnusableError:
        raise
    except (OSError, EOFError, ValueError, TypeError, KeyError, OverflowError, MemoryError, RecursionError) as exc:
        # numpy's .npy reader, json and int() raise ValueError and kin; a disk error raises OSError
        raise IndexCorruptError(f"{target} is corrupt ({type(exc).__name__}); run `repocomp index` to rebuild it"
                                ) from None


def set_aside(target: Path) -> Path | None:
    """Rename a rejected index file to `<name>.rejected` next to it (an earlier rejected one is replaced), so a
    rebuild loses nothing: a symbolic link is renamed itself, what it points to is never touched. None when the
    folder cannot be written (the rebuilt index then goes to the user's cache)."""
    aside = target.with_name(target.name + REJECTED_SUFFIX)
    try:
        if stat.S_ISDIR(aside.lstat().st_mode):
            return None
    except OSError:
        pass
    try:
        os.replace(target, aside)
    except OSError:
        return None
    return aside


def read_meta(folder: Path) -> dict[str, Any] | None:
    """The JSON header's `meta` of the index file of `folder` without its arrays; None when there is no regular
    file there or it cannot be read (what `read_state` would say why)."""
    target = folder / INDEX_FILE
    try:
        with _opened(target) as (fh, size):
            return _read_header(fh, target, size)[0]
    except (IndexUnusableError, OSError, ValueError, TypeError, KeyError, UnicodeDecodeError, RecursionError):
        return None


@contextlib.contextmanager
def _opened(target: Path) -> Iterator[tuple[io.BufferedReader, int]]:
    """`target` opened for reading, and its size; a symbolic link (O_NOFOLLOW: even one swapped in after a check)
    or anything but a regular file is refused."""
    fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file")
        yield fh, st.st_size


def _read_header(fh: io.BufferedIOBase, target: Path, size: int) -> tuple[dict[str, Any], list[str]]:
    if fh.readline(len(MAGIC)) != MAGIC:
        raise IndexCorruptError(f"{target} is not a repocomp index; delete it or run `repocomp index` to rebuild")
    version = fh.readline(16).strip()
    if version != str(FORMAT_VERSION).encode():
        if not version.isdigit():
            raise ValueError("format version")
        raise IndexStaleError(f"{target} has format version {version.decode()}, this repocomp reads "
                              f"{FORMAT_VERSION}; run `repocomp index` to rebuild it")
    length = int(fh.readline(24))
    if not 0 < length <= min(size, _MAX_HEADER_BYTES):
        raise ValueError("header length")
    header = json.loads(fh.read(length).decode("utf-8"))
    meta, names = header["meta"], header["arrays"]
    if not isinstance(meta, dict) or not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError("header layout")
    return meta, names


def _read(fh: io.BufferedReader, target: Path, size: int) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    meta, names = _read_header(fh, target, size)
    mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)  # private: writes never reach the file
    arrays = {name: _read_array(fh, size, mapped) for name in names}
    if fh.tell() != size:
        raise ValueError("trailing bytes")
    return meta, arrays


def _read_array(fh: io.BufferedIOBase, size: int, mapped: mmap.mmap) -> np.ndarray:
    """One `.npy` record as a view of `mapped`, its header checked first (dtype kind, byte count within the
    file)."""
    fh.seek(-fh.tell() % ALIGN, io.SEEK_CUR)
    major, _ = npy.read_magic(fh)
    read_header = npy.read_array_header_1_0 if major == 1 else npy.read_array_header_2_0
    shape, fortran, dtype = read_header(fh)
    if dtype.kind not in _ARRAY_KINDS or dtype.fields is not None or dtype.subdtype is not None:
        raise ValueError(f"dtype {dtype}")
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    at = fh.tell()
    if count < 0 or count * dtype.itemsize > size - at:
        raise ValueError("array larger than the file")
    fh.seek(count * dtype.itemsize, io.SEEK_CUR)
    return _view(mapped, at, dtype, shape, fortran)


def _view(mapped: mmap.mmap, at: int, dtype: np.dtype, shape: tuple[int, ...], fortran: bool = False) -> np.ndarray:
    """The array of `shape` whose data starts at byte `at` of `mapped`, as a view of it."""
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    arr = np.frombuffer(mapped, dtype, count, at) if count else np.empty(0, dtype)
    return arr.reshape(shape, order="F" if fortran else "C")


_PAGE_OUT_BYTES = 64 << 20


_kept = threading.local()


@contextlib.contextmanager
def pages_kept() -> Iterator[None]:
    """`page_out` does nothing on this thread meanwhile: a save beside the language server's requests, which read
    the pages it would give back (each read again from the disk: a monorepo's requests 3 to 5 times slower)."""
    before = getattr(_kept, "on", False)
    _kept.on = True
    try:
        yield
    finally:
        _kept.on = before


def page_out(mapped: mmap.mmap | None) -> None:
    """Ask the kernel to take back the pages of an index file's map that are as the file holds them (read again
    from it when used); pages written since (an update's copies) stay. A hint: refused (another OS, an old kernel),
    nothing happens; nothing either inside `pages_kept()`."""
    if mapped is not None and not getattr(_kept, "on", False):
        with contextlib.suppress(OSError, ValueError):
            # a range at a time: each call holds the interpreter's lock (a 1.8 GB index's map: 100 ms at once)
            for start in range(0, len(mapped), _PAGE_OUT_BYTES):
                mapped.madvise(_MADV_PAGEOUT, start, min(_PAGE_OUT_BYTES, len(mapped) - start))


_READ_AHEAD_BYTES = 2 << 20  # the kernel reads at most its readahead window (a few MB) for one hint


def read_ahead(mapped: mmap.mmap | None) -> None:
    """Ask the kernel to read the index file into its page cache (MADV_WILLNEED) without mapping it: the process's
    resident set stays as it is, and a request's first read of a page (a file's text, its parse) is a memory
    read, not a disk read (a first request at a new place of a monorepo, in process: p50 25 against 31 ms). 1.8 GB
    in 0.4 s on a 2-core VM's disk; the cache is the kernel's to give back. A hint: refused, nothing happens."""
    if mapped is not None:
        with contextlib.suppress(OSError, ValueError):
            for start in range(0, len(mapped), _READ_AHEAD_BYTES):
                mapped.madvise(mmap.MADV_WILLNEED, start, min(_READ_AHEAD_BYTES, len(mapped) - start))


def file_map(arr: np.ndarray) -> mmap.mmap | None:
    """The map of an index file that `arr` is a view of (`read_state`), if it is one."""
    base = arr.base
    while isinstance(base, np.ndarray):
        base = base.base
    return base.obj if isinstance(base, memoryview) and isinstance(base.obj, mmap.mmap) else None


def remove_stale_tmp(folder: Path, max_age_s: float = STALE_TMP_S) -> int:
    """Delete temporary files of index writes that died (older than `max_age_s`); how many were removed."""
    removed = 0
    now = time.time()
    try:
        candidates = list(folder.glob(f"{TMP_PREFIX}*{TMP_SUFFIX}"))
    except OSError:
        return 0
    for tmp in candidates:
        try:
            st = tmp.lstat()
            if stat.S_ISREG(st.st_mode) and now - st.st_mtime > max_age_s:
                tmp.unlink()
                removed += 1
        except OSError:  # gone already, or a read-only folder: nothing to do
            continue
    return removed


def fallback_dir(root: Path) -> Path:
    """Where the index of a repository that cannot be written goes: the user's cache, one folder per root."""
    digest = hashlib.sha256(str(root).encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return user_cache_dir() / "indexes" / f"{root.name}-{digest}"
