"""Recall storage (MemGPT): the folder's whole session history, on disk in the user's cache.

One JSON file per folder, `$XDG_CACHE_HOME/repocomp/memory/<folder name>-<hash of resolved root>.json` (never
inside the repository), of plain data only: hunks and thoughts as lists and numbers, read back by checking every
field (type, bound, length). It is bounded (`max_bytes`: the oldest hunks are dropped to fit), written
atomically (a temporary file renamed over it), and survives a restart. A file that does not read back (not JSON,
another version, a wrong type, a number out of bounds, junk nested deep, larger than the bound) gives ONE warning
naming it, is set aside as `<name>.rejected`, and the memory starts empty. Nothing in it is ever executed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import stat
import tempfile
from pathlib import Path
from typing import Any

from repocomp.config.paths import user_cache_dir
from repocomp.memory.hunks import Hunk
from repocomp.memory.thoughts import MAX_IDS, MAX_PATHS, MAX_THOUGHTS, Thought

__all__ = ["FORMAT_VERSION", "RecallStore", "default_cache_dir"]

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
MAX_STORED_HUNKS = 50_000
MAX_LINES = 100_000  # lines of one stored hunk
MAX_LINE = 100_000  # characters of one stored line
MAX_PATH = 4096
MAX_TEXT = 1000  # characters of a thought's text or key
MAX_LINE_NO = 100_000_000
MAX_ID = 1 << 53
MAX_TIME = 1e11  # seconds since the epoch (year 5138): a larger time is crafted
_KINDS = ("rename", "signature", "repeated")
_SOURCES = ("typed", "accepted")


def default_cache_dir() -> Path:
    return user_cache_dir() / "memory"


class _Rejected(ValueError):
    pass


def _need(cond: bool, what: str) -> None:
    if not cond:
        raise _Rejected(what)


def _int(v: Any, lo: int, hi: int, what: str) -> int:
    _need(type(v) is int and lo <= v <= hi, f"{what} must be an integer in {lo}..{hi}")
    return v


def _float(v: Any, what: str) -> float:
    _need(type(v) in (int, float) and math.isfinite(v) and 0 <= v <= MAX_TIME, f"{what} must be a time")
    return float(v)


def _str(v: Any, limit: int, what: str) -> str:
    _need(type(v) is str and len(v) <= limit, f"{what} must be a string of at most {limit} characters")
    return v


def _path(v: Any, what: str) -> str:
    p = _str(v, MAX_PATH, what)
    _need(bool(p) and not p.startswith("/") and ".." not in p.split("/") and "\x00" not in p
          and not re.match(r"[A-Za-z]:", p), f"{what} must be a relative path inside the folder")
    return p


def _lines(v: Any, what: str) -> list[str]:
    _need(type(v) is list and len(v) <= MAX_LINES, f"{what} must be a list of at most {MAX_LINES} lines")
    return [_str(x, MAX_LINE, what) for x in v]


def _hunk(d: Any) -> Hunk:
    _need(type(d) is dict, "a hunk must be an object")
    _need(set(d) == {"id", "path", "start_line", "removed", "inserted", "first_time", "last_time", "source"},
          "a hunk has exactly the fields id, path, start_line, removed, inserted, first_time, last_time, source")
    source = _str(d["source"], 16, "source")
    _need(source in _SOURCES, f"source must be one of {', '.join(_SOURCES)}")
    first, last = _float(d["first_time"], "first_time"), _float(d["last_time"], "last_time")
    _need(first <= last, "first_time must not be after last_time")
    return Hunk(_int(d["id"], 1, MAX_ID, "id"), _path(d["path"], "path"),
                _int(d["start_line"], 0, MAX_LINE_NO, "start_line"), _lines(d["removed"], "removed"),
                _lines(d["inserted"], "inserted"), first, last, source)


def _thought(d: Any) -> Thought:
    _need(type(d) is dict, "a thought must be an object")
    _need(set(d) == {"kind", "key", "text", "paths", "hunk_ids", "time", "count"},
          "a thought has exactly the fields kind, key, text, paths, hunk_ids, time, count")
    kind = _str(d["kind"], 16, "kind")
    _need(kind in _KINDS, f"kind must be one of {', '.join(_KINDS)}")
    key = _str(d["key"], MAX_TEXT, "key")
    _need(key.startswith(kind + ":"), "a thought's key must start with its kind")
    text = _str(d["text"], MAX_TEXT, "text")
    _need("\n" not in text and "\r" not in text, "a thought's text is one line")
    paths, ids = d["paths"], d["hunk_ids"]
    _need(type(paths) is list and 0 < len(paths) <= MAX_PATHS, f"paths must be a list of 1..{MAX_PATHS} paths")
    _need(type(ids) is list and 0 < len(ids) <= MAX_IDS, f"hunk_ids must be a list of 1..{MAX_IDS} ids")
    return Thought(kind, key, text, tuple(_path(p, "paths") for p in paths),
                   tuple(_int(i, 1, MAX_ID, "hunk_ids") for i in ids), _float(d["time"], "time"),
                   _int(d["count"], 1, MAX_ID, "count"))


def _plain_hunk(h: Hunk) -> dict[str, Any]:
    return {"id": h.id, "path": h.path, "start_line": h.start_line, "removed": list(h.removed),
            "inserted": list(h.inserted), "first_time": h.first_time, "last_time": h.last_time, "source": h.source}


def _plain_thought(t: Thought) -> dict[str, Any]:
    return {"kind": t.kind, "key": t.key, "text": t.text, "paths": list(t.paths), "hunk_ids": list(t.hunk_ids),
            "time": t.time, "count": t.count}


def _reject_constant(name: str) -> float:
    raise _Rejected(f"{name} is not a number")


class RecallStore:
    """The folder's session history on disk (see the module docstring)."""

    def __init__(self, root: Path, max_bytes: int = 2_000_000, cache_dir: Path | None = None) -> None:
        resolved = Path(root).resolve()
        self.root = resolved
        self.max_bytes = max(1_000, int(max_bytes))
        folder = re.sub(r"[^A-Za-z0-9._-]", "_", resolved.name)[:40] or "root"
        digest = hashlib.sha256(str(resolved).encode("utf-8", "surrogatepass")).hexdigest()[:16]
        base = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self.path: Path = base / f"{folder}-{digest}.json"
        # never inside the repository: a cache directory there (XDG_CACHE_HOME under the folder) disables it
        self.enabled = not _inside(self.path, resolved)
        if not self.enabled:
            log.warning("session memory: the recall storage %s would lie inside the repository %s; not kept on "
                        "disk (set XDG_CACHE_HOME outside it)", self.path, resolved)

    def load(self) -> tuple[list[Hunk], list[Thought]]:
        """The stored hunks (oldest first) and thoughts; empty when there is no file. A file that does not read
        back is set aside (`.rejected`) with one warning, and the memory starts empty."""
        if not self.enabled:
            return [], []
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
                         | getattr(os, "O_NOFOLLOW", 0))
        except FileNotFoundError:
            return [], []
        except OSError as exc:
            return self._reject(f"cannot be opened ({exc.strerror})")
        try:
            with os.fdopen(fd, "rb") as fh:
                if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                    return self._reject("is not a regular file")
                data = fh.read(2 * self.max_bytes + 1)
        except OSError as exc:
            return self._reject(f"cannot be read ({exc.strerror})")
        if len(data) > 2 * self.max_bytes:
            return self._reject(f"is larger than {2 * self.max_bytes:,} bytes")
        try:
            doc = json.loads(data.decode("utf-8"), parse_constant=_reject_constant)
            _need(type(doc) is dict, "the document must be an object")
            _need(doc.get("version") == FORMAT_VERSION and type(doc.get("version")) is int,
                  f"version must be {FORMAT_VERSION}")
            _need(set(doc) == {"version", "root", "hunks", "thoughts"},
                  "the document has exactly the fields version, root, hunks, thoughts")
            _need(doc["root"] == str(self.root), "it belongs to another folder")
            hunks, thoughts = doc["hunks"], doc["thoughts"]
            _need(type(hunks) is list and len(hunks) <= MAX_STORED_HUNKS,
                  f"hunks must be a list of at most {MAX_STORED_HUNKS}")
            _need(type(thoughts) is list and len(thoughts) <= MAX_THOUGHTS,
                  f"thoughts must be a list of at most {MAX_THOUGHTS}")
            out_h = [_hunk(h) for h in hunks]
            _need(len({h.id for h in out_h}) == len(out_h), "hunk ids must be unique")
            out_t = [_thought(t) for t in thoughts]
            _need(len({t.key for t in out_t}) == len(out_t), "thought keys must be unique")
        except _Rejected as exc:
            return self._reject(f"is not a valid memory file ({exc})")
        except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError; an integer of too many digits
            return self._reject(f"is not valid JSON ({type(exc).__name__}: {str(exc)[:120]})")
        except (RecursionError, MemoryError):
            return self._reject("is nested too deeply to read")
        return out_h, out_t

    def save(self, hunks: list[Hunk], thoughts: list[Thought]) -> None:
        """Write the history (atomic: a temporary file renamed over the old). Past `max_bytes` the oldest hunks
        (by last edit) are left out."""
        if not self.enabled:
            return
        plain_h = [_plain_hunk(h) for h in sorted(hunks, key=lambda h: (h.last_time, h.id))][-MAX_STORED_HUNKS:]
        plain_t = [_plain_thought(t) for t in thoughts][-MAX_THOUGHTS:]
        head = {"version": FORMAT_VERSION, "root": str(self.root), "hunks": [], "thoughts": plain_t}
        used = len(_dumps(head))
        sizes = [len(_dumps(h)) + 1 for h in plain_h]
        keep = len(plain_h)
        total = used + sum(sizes)
        while keep and total > self.max_bytes:
            total -= sizes[len(plain_h) - keep]
            keep -= 1
        head["hunks"] = plain_h[len(plain_h) - keep:]
        data = _dumps(head)
        if len(data) > self.max_bytes:  # the thoughts alone are too large for the bound
            head["thoughts"] = []
            data = _dumps(head)
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(prefix=self.path.name + ".", suffix=".tmp", dir=self.path.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    def clear(self) -> None:
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass

    def _reject(self, why: str) -> tuple[list[Hunk], list[Thought]]:
        aside = self.path.with_name(self.path.name + ".rejected")
        try:
            os.replace(self.path, aside)
            where = f"set aside as {aside}"
        except OSError as exc:
            where = f"could not be set aside ({exc.strerror})"
        log.warning("session memory: %s %s; %s, starting with an empty memory", self.path, why, where)
        return [], []


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=True, separators=(",", ":"), allow_nan=False).encode("ascii")


def _inside(path: Path, root: Path) -> bool:
    try:
        real = path.parent.resolve() / path.name
    except (OSError, RuntimeError):
        return True
    return real.is_relative_to(root)
