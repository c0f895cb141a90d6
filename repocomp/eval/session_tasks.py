"""Editing-session tasks: commits of a repository's history replayed as a developer would type them.

Making (`make_session_tasks`): ordinary commits (one parent present, not a merge) that touch 1-5 source files
(Python, not vendored, generated, hidden or build copies; none deleted, not only added) in 2-20 hunks
(`git diff -U0`) of at most `max_changed_lines` lines are replayed from the parent's tree: files in path order,
each file's hunks top to bottom, each hunk typed as one edit. A hole is an added line of a hunk after the commit's
first (the memory must have something), by the line tasks' rule (code, not a comment or inside a docstring, the
line above not blank) plus at least `min_chars` characters and not only brackets. Before a hole the developer
has typed the earlier hunks and the current hunk's lines above the hole (its removed lines are gone).

A task is a RepoEval record (`prompt`, `metadata`: `task_id`, `ground_truth` = the hole's line, `fpath_tuple`,
`line_no`, `context_start_lineno` with the line tasks' 2,000-token in-file budget, `kind` = "session") whose
`metadata.session` holds the replay, all of it from before the hole:
    repo, commit, parent            the repository's name and the commit (whose parent's tree is the start)
    hunk, hunks                     the hole's hunk (0-based, in typing order) and the commit's number of hunks
    before_hole                     the hole's file as typed, up to the hole (lines [0, line_no), newline-ended)
    after_hole                      the buffer's text below the hole's (empty) line at that moment: the parent's
                                    code below the typed part of the hunk (its removed lines gone), the lines of
                                    the hunks typed before it; never a line the developer typed later
    files                           [{path, from, status}] the files opened before the hole, in order: `from` is
                                    the path in the parent's tree it starts from (null: a new file, empty), status
                                    M (modified), A (added) or R (renamed from `from`)
    events                          the memory's events, in order: {"type": "opened", path, from, time} (the text
                                    is `from`'s in the parent tree) and {"type": "edited", path, start_line,
                                    start_col, end_line, end_col, removed, inserted, time} (a `TextEdit` of the
                                    memory contract, applied to the file as it was before it); `time` is seconds
                                    since the session started (the runner puts the session in the recent past)
The edits are the diff: applied to the parent's files they give every typed file (`typed_texts`). Nothing typed
at or after the hole is in a task except `ground_truth`.

The buffer an editor has at the hole (`session_buffer`) is `before_hole`, the empty hole line and `after_hole`;
with `repocomp eval --editor` the engine gets that buffer (the code after the cursor too) and the index holds it,
otherwise the file up to the hole, as the line tasks' RepoCoder protocol has it.

Running (`run_session_tasks`, called by the runner for tasks of kind "session"): the parent's tree is checked out
once into the user's cache (keyed by repository and sha) and indexed there (`Index.open`, stored beside it, so
tasks of one parent share it and a rerun reuses it); before each task the index holds the typed files (the hole's
file up to the hole, as the line tasks do), renamed-away files are removed, and a fresh `SessionMemory` gets the
events; after it, the files go back to the parent's. `--repos` holds the histories: `NAME.git` (bare), `NAME`
(a clone) or `NAME.git.tar.gz` (unpacked into the cache).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import os
import random
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graph.languages import language_for
from repocomp.config.paths import user_cache_dir
from repocomp.config.schema import Config
from repocomp.errors import RepocompError
from repocomp.eval.generation_cache import counting, counts_fields, eval_backend
from repocomp.eval.records import error_record, make_record, memory_fields, session_fields
from repocomp.eval.tasks import COMPLETION_KIND, SESSION_KIND, Task, _non_code_rows, _parser, _prompt_for

if TYPE_CHECKING:
    from repocomp.eval.runner import EvalOptions

EngineFactory = Callable[[Path, Config, "EvalOptions"], tuple[Any, Any]]  # (index, completer) of a tree

_SOURCE_SUFFIXES = (".py",)
_SKIP_DIRS = {"__pycache__", "node_modules", "venv", "build", "dist", "site-packages", "vendor", "vendored",
              "_vendor", "third_party", "thirdparty", "external", "generated", "_generated"}
_GENERATED_NAME = re.compile(r"(_pb2(_grpc)?|_generated|\.generated)\.py$")
_GENERATED_HEAD = re.compile(r"generated by|do not edit|@generated|autogenerated|auto-generated", re.IGNORECASE)
_BRACKETS_ONLY = re.compile(r"^[\s()\[\]{},:;.\\]*$")
_HUNK_HEADER = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@", re.MULTILINE)
_ODD_BREAKS = re.compile("[\r\x00\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029\ufeff]")
_EVENT_STEP_S = 5.0  # seconds between events of a replayed session
_MAX_FILE_BYTES = 1 << 20
_GIT = ("git", "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "core.quotePath=false")


# ------------------------------------------------------------------------------------------------------ git


def _git(git_dir: Path, *args: str, input: bytes | None = None, env: dict[str, str] | None = None) -> bytes:
    try:
        done = subprocess.run([*_GIT, "--git-dir", str(git_dir), *args], input=input, capture_output=True,
                              check=False, env={**os.environ, "GIT_TERMINAL_PROMPT": "0", **(env or {})})
    except FileNotFoundError:
        raise RepocompError("git is not installed; session tasks read a repository's history with git") from None
    if done.returncode != 0:
        raise RepocompError(f"git {' '.join(args[:3])} failed in {git_dir}: "
                            f"{done.stderr.decode('utf-8', 'replace').strip()[:300]}")
    return done.stdout


def open_history(path: str | os.PathLike[str]) -> tuple[Path, str]:
    """(git directory, repository name) of a bare repository `NAME.git`, a clone `NAME`, or an archive
    `NAME.git.tar.gz` of a bare one (unpacked once into the user's cache, never beside the archive)."""
    path = Path(path)
    name = path.name
    for suffix in (".tar.gz", ".tgz", ".tar"):
        if name.endswith(suffix) and path.is_file():
            path = _unpack(path, name[: -len(suffix)])
            name = path.name
            break
    if name.endswith(".git") and len(name) > 4:
        name = name[:-4]
    if (path / ".git").is_dir():
        path = path / ".git"
    if not (path / "HEAD").is_file() or not (path / "objects").is_dir():
        raise RepocompError(f"{path} is not a git repository (a bare NAME.git, a clone, or NAME.git.tar.gz)")
    return path.resolve(), name


def _unpack(archive: Path, stem: str) -> Path:
    digest = hashlib.sha256(f"{archive.resolve()}:{archive.stat().st_size}:{archive.stat().st_mtime_ns}"
                            .encode()).hexdigest()[:12]
    target = user_cache_dir() / "benchmarks" / f"{stem}-{digest}"
    if not target.is_dir():
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".unpack-"))
        try:
            with tarfile.open(archive) as tar:
                tar.extractall(tmp, filter="data")
            tops = [p for p in tmp.iterdir()]
            if len(tops) != 1 or not tops[0].is_dir():
                raise RepocompError(f"{archive} must hold one folder (a bare repository), found {len(tops)} entries")
            tmp.rename(target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    (top,) = list(target.iterdir())
    return top


def find_history(repos_dir: Path, name: str) -> Path:
    """The history of repository `name` in --repos: NAME.git, NAME or NAME.git.tar.gz."""
    for candidate in (repos_dir / f"{name}.git", repos_dir / name, repos_dir / f"{name}.git.tar.gz"):
        if candidate.exists():
            return open_history(candidate)[0]
    raise RepocompError(f"no history of {name!r} in {repos_dir}: expected {name}.git, {name} (a clone) or "
                        f"{name}.git.tar.gz")


def materialize(git_dir: Path, name: str, sha: str, cache: Path | None = None) -> Path:
    """The tree of commit `sha` checked out (exactly: no export-ignore, no filters) into the user's cache, once."""
    if not re.fullmatch(r"[0-9a-f]{40}", sha):
        raise RepocompError(f"{sha!r} is not a full commit sha")
    target = (cache or user_cache_dir() / "eval" / "trees") / name / sha
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{sha[:12]}-"))
    try:
        index_file = tmp / ".git-index"
        tree = tmp / "tree"
        tree.mkdir()
        env = {"GIT_INDEX_FILE": str(index_file)}
        _git(git_dir, "read-tree", sha, env=env)
        _git(git_dir, "--work-tree", str(tree), "checkout-index", "-a", "-f", env=env)
        try:
            tree.rename(target)
        except OSError:  # another run made it meanwhile
            if not target.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


# ---------------------------------------------------------------------------------------------- the commits


@dataclass(frozen=True)
class DiffHunk:
    old_start: int  # 0-based line in the parent's file where the removed lines start (or the insertion point)
    removed: tuple[str, ...]  # lines with their line ends
    inserted: tuple[str, ...]
    new_start: int  # 0-based line of the inserted lines in the commit's file


@dataclass(frozen=True)
class FileChange:
    path: str
    src: str | None  # the path in the parent's tree (None: added)
    status: str  # M, A, R
    new_text: str
    hunks: tuple[DiffHunk, ...]


@dataclass
class _Entry:  # one line of `git diff-tree --raw`
    status: str
    old_blob: str
    new_blob: str
    path: str
    src: str


def is_source(path: str) -> bool:
    """A file a session may be typed in: Python, outside hidden, build, vendored and generated folders."""
    parts = path.split("/")
    if not parts[-1].endswith(_SOURCE_SUFFIXES) or _GENERATED_NAME.search(parts[-1]):
        return False
    return not any(d in _SKIP_DIRS or d.startswith(".") for d in parts[:-1])


def _commits(git_dir: Path) -> list[tuple[str, str]]:
    """(commit, parent) of every non-merge commit reachable from HEAD whose parent is present, newest first."""
    pairs = []
    for line in _git(git_dir, "rev-list", "--no-merges", "--parents", "HEAD").decode().splitlines():
        shas = line.split()
        if len(shas) == 2:  # a root or a shallow boundary lists no parent
            pairs.append((shas[0], shas[1]))
    if not pairs:
        return []
    parents = sorted({p for _, p in pairs})
    answer = _git(git_dir, "cat-file", "--batch-check", input=("\n".join(parents) + "\n").encode()).decode()
    present = {f[0] for f in (ln.split() for ln in answer.splitlines()) if len(f) >= 2 and f[1] == "commit"}
    return [(c, p) for c, p in pairs if p in present]


def _raw_diff(git_dir: Path, parent: str, commit: str) -> list[_Entry]:
    out = _git(git_dir, "diff-tree", "-r", "-M", "--no-commit-id", "--raw", "-z", "--no-abbrev", parent, commit)
    fields = out.split(b"\0")
    entries = []
    i = 0
    while i < len(fields) and fields[i]:
        meta = fields[i].decode().lstrip(":").split()
        status = meta[4][0]
        if status in "RC":
            src, path = fields[i + 1], fields[i + 2]
            i += 3
        else:
            src = path = fields[i + 1]
            i += 2
        try:
            entries.append(_Entry(status, meta[2], meta[3], path.decode("utf-8"), src.decode("utf-8")))
        except UnicodeDecodeError:
            entries.append(_Entry("X", meta[2], meta[3], "", ""))  # an undecodable name: the commit is skipped
    return entries


def _source_entries(entries: list[_Entry], max_files: int) -> list[_Entry] | None:
    """The commit's source changes when it qualifies by its file list, else None."""
    if any(e.status == "X" for e in entries):
        return None
    source = [e for e in entries if is_source(e.path) or (e.status == "R" and is_source(e.src))]
    if not 1 <= len(source) <= max_files:
        return None
    if any(e.status not in "MAR" or not is_source(e.path) for e in source):  # deleted, copied, type changed, moved out
        return None
    if all(e.status == "A" for e in source):
        return None
    return sorted(source, key=lambda e: e.path)


def _blobs(git_dir: Path, shas: list[str]) -> dict[str, bytes]:
    wanted = sorted({s for s in shas if s and set(s) != {"0"}})
    if not wanted:
        return {}
    out = _git(git_dir, "cat-file", "--batch", input=("\n".join(wanted) + "\n").encode())
    blobs, pos = {}, 0
    for sha in wanted:
        end = out.index(b"\n", pos)
        header = out[pos:end].split()
        size = int(header[2])
        blobs[sha] = out[end + 1:end + 1 + size]
        pos = end + 1 + size + 1
    return blobs


def _diff_hunks(git_dir: Path, old_blob: str | None, new_blob: str, old_lines: list[str],
                new_lines: list[str]) -> list[DiffHunk]:
    if old_blob is None:
        return [DiffHunk(0, (), tuple(new_lines), 0)] if new_lines else []
    out = _git(git_dir, "diff", "-U0", "--no-color", "--no-ext-diff", "--no-textconv", old_blob, new_blob)
    hunks = []
    for m in _HUNK_HEADER.finditer(out):
        a, b = int(m.group(1)), int(m.group(2) or 1)
        c, d = int(m.group(3)), int(m.group(4) or 1)
        old0 = a if b == 0 else a - 1
        new0 = c if d == 0 else c - 1
        hunks.append(DiffHunk(old0, tuple(old_lines[old0:old0 + b]), tuple(new_lines[new0:new0 + d]), new0))
    return hunks


def commit_changes(git_dir: Path, parent: str, commit: str, *, max_files: int = 5,
                   max_changed_lines: int = 400) -> list[FileChange] | None:
    """The commit's source changes, hunk by hunk; None when the commit does not qualify by its files (see the
    module's docstring) or its size (more than `max_changed_lines` lines added and removed, a file over 1 MiB,
    text that is not UTF-8, a generated file)."""
    entries = _source_entries(_raw_diff(git_dir, parent, commit), max_files)
    if entries is None:
        return None
    blobs = _blobs(git_dir, [e.old_blob for e in entries if e.status != "A"] + [e.new_blob for e in entries])
    changes = []
    changed_lines = 0
    for e in entries:
        try:
            old = "" if e.status == "A" else blobs[e.old_blob].decode("utf-8")
            new = blobs[e.new_blob].decode("utf-8")
        except (UnicodeDecodeError, KeyError):
            return None
        if len(old) > _MAX_FILE_BYTES or len(new) > _MAX_FILE_BYTES or _ODD_BREAKS.search(old + new):
            return None  # lines must be git's lines (and the index's): no CR, form feed, U+2028..., BOM or NUL
        if _GENERATED_HEAD.search("".join(new.splitlines(keepends=True)[:5])):
            return None
        old_lines, new_lines = old.splitlines(keepends=True), new.splitlines(keepends=True)
        hunks = _diff_hunks(git_dir, None if e.status == "A" else e.old_blob, e.new_blob, old_lines, new_lines)
        changed_lines += sum(len(h.removed) + len(h.inserted) for h in hunks)
        if changed_lines > max_changed_lines:
            return None
        changes.append(FileChange(e.path, None if e.status == "A" else e.src, e.status, new, tuple(hunks)))
    return changes


# ---------------------------------------------------------------------------------------------- the holes


def hole_line_ok(lines: list[str], i: int, non_code: set[int], min_chars: int) -> bool:
    """The line tasks' rule (code: not blank, not a comment, not inside a docstring or multi-line string, the line
    above not blank) plus: at least `min_chars` characters stripped, not only brackets and punctuation."""
    s = lines[i].strip()
    if i == 0 or not s or s.startswith("#") or i in non_code or not lines[i - 1].strip():
        return False
    return len(s) >= min_chars and not _BRACKETS_ONLY.match(s)


def _edit(path: str, start_line: int, removed: str, inserted: str, t: float) -> dict[str, Any]:
    """A TextEdit (as a dict) replacing `removed`, which starts at column 0 of `start_line`, by `inserted`."""
    n = removed.count("\n")
    end_col = len(removed) - (removed.rfind("\n") + 1) if n else len(removed)
    return {"type": "edited", "path": path, "start_line": start_line, "start_col": 0, "end_line": start_line + n,
            "end_col": end_col, "removed": removed, "inserted": inserted, "time": t}


@dataclass
class _Replay:
    """The session of one commit, event by event: what was typed before each hunk."""

    events: list[dict[str, Any]] = field(default_factory=list)
    files: list[dict[str, Any]] = field(default_factory=list)
    buffers: dict[str, list[str]] = field(default_factory=dict)

    def tick(self) -> float:
        return _EVENT_STEP_S * len(self.events)

    def open(self, change: FileChange, parent_text: str) -> None:
        if change.path in self.buffers:
            return
        self.files.append({"path": change.path, "from": change.src, "status": change.status})
        self.events.append({"type": "opened", "path": change.path, "from": change.src, "time": self.tick()})
        self.buffers[change.path] = parent_text.splitlines(keepends=True)

    def type_hunk(self, path: str, at: int, removed: tuple[str, ...], inserted: tuple[str, ...]) -> None:
        if not removed and not inserted:
            return
        buf = self.buffers[path]
        if tuple(buf[at:at + len(removed)]) != removed:
            raise ValueError(f"the diff does not apply to the parent's {path}")
        self.events.append(_edit(path, at, "".join(removed), "".join(inserted), self.tick()))
        buf[at:at + len(removed)] = list(inserted)


def _commit_tasks(name: str, commit: str, parent: str, changes: list[FileChange], parent_texts: dict[str, str],
                  rng: random.Random, *, per_commit: int, min_chars: int, prompt_tokens: int, seed: int
                  ) -> list[Task]:
    steps = [(fc, h) for fc in changes for h in fc.hunks]
    if not 2 <= len(steps) <= 20:
        return []
    parser = _parser()
    non_code = {fc.path: _non_code_rows(parser.parse(fc.new_text.encode("utf-8"))) for fc in changes}
    finals = {fc.path: fc.new_text.splitlines() for fc in changes}
    candidates = [(g, j) for g, (fc, h) in enumerate(steps) if g > 0 for j in range(len(h.inserted))
                  if hole_line_ok(finals[fc.path], h.new_start + j, non_code[fc.path], min_chars)]
    rng.shuffle(candidates)
    chosen, seen = [], set()
    for g, j in candidates:
        key = steps[g][1].inserted[j].strip()
        if key not in seen:
            seen.add(key)
            chosen.append((g, j))
        if len(chosen) >= per_commit:
            break
    chosen.sort()
    tasks: list[Task] = []
    replay = _Replay()
    offsets: dict[str, int] = {}
    want = iter(chosen + [(len(steps), 0)])
    next_hole = next(want)
    for g, (fc, h) in enumerate(steps):
        replay.open(fc, parent_texts.get(fc.src, "") if fc.src is not None else "")
        at = h.old_start + offsets.get(fc.path, 0)
        if at != h.new_start:
            raise ValueError(f"hunks of {fc.path} out of order")
        while next_hole[0] == g:
            j = next_hole[1]
            partial = _Replay(list(replay.events), list(replay.files), {fc.path: list(replay.buffers[fc.path])})
            partial.type_hunk(fc.path, at, h.removed, h.inserted[:j])
            hole = at + j
            before = partial.buffers[fc.path][:hole]
            lines = [ln.rstrip("\n") for ln in before]
            prompt, start = _prompt_for(lines, hole, prompt_tokens)
            session = {"repo": name, "commit": commit, "parent": parent, "hunk": g, "hunks": len(steps),
                       "before_hole": "".join(before), "after_hole": "".join(partial.buffers[fc.path][hole:]),
                       "files": partial.files, "events": partial.events}
            tasks.append(Task(task_id=f"{name}/session/{commit[:12]}/{len(tasks)}", repo=name, path=fc.path,
                              prompt=prompt, ground_truth=h.inserted[j].rstrip("\n"), line_no=hole,
                              context_start_lineno=start, kind=SESSION_KIND, language=language_for(fc.path) or "",
                              metadata={"seed": seed, "session": session}))
            next_hole = next(want)
        replay.type_hunk(fc.path, at, h.removed, h.inserted)
        offsets[fc.path] = offsets.get(fc.path, 0) + len(h.inserted) - len(h.removed)
    return tasks


def make_session_tasks(history: str | os.PathLike[str], n: int = 100, seed: int = 0, *, per_commit: int = 5,
                       min_chars: int = 8, max_files: int = 5, max_changed_lines: int = 400,
                       prompt_tokens: int = 2000, stats: dict[str, Any] | None = None) -> list[Task]:
    """Up to `n` session tasks from the history at `history` (see the module's docstring), at most `per_commit`
    from one commit; commits are taken in an order shuffled with `seed` (deterministic). `stats`, when given, is
    filled with the commits looked at, qualifying and used."""
    git_dir, name = open_history(history)
    pairs = _commits(git_dir)
    rng = random.Random(seed)
    order = list(pairs)
    rng.shuffle(order)
    tasks: list[Task] = []
    looked = qualified = used = 0
    for commit, parent in order:
        if len(tasks) >= n:
            break
        looked += 1
        changes = commit_changes(git_dir, parent, commit, max_files=max_files, max_changed_lines=max_changed_lines)
        if changes is None:
            continue
        srcs = [fc.src for fc in changes if fc.src is not None]
        blobs = _git(git_dir, "cat-file", "--batch", input="".join(f"{parent}:{s}\n" for s in srcs).encode())
        parent_texts = _split_batch(blobs, srcs)
        if parent_texts is None:
            continue
        if not 2 <= sum(len(fc.hunks) for fc in changes) <= 20:
            continue
        qualified += 1
        commit_rng = random.Random(f"{seed}:{commit}")  # a commit's holes do not depend on the ones before it
        try:
            made = _commit_tasks(name, commit, parent, changes, parent_texts, commit_rng, per_commit=per_commit,
                                 min_chars=min_chars, prompt_tokens=prompt_tokens, seed=seed)
        except ValueError:  # git's diff and the files disagree: the commit is left out
            continue
        if made:
            used += 1
            tasks.extend(made[: n - len(tasks)])
    if stats is not None:
        stats.update(repo=name, commits=len(pairs), looked=looked, qualified=qualified, used=used, tasks=len(tasks))
    return tasks


def _split_batch(out: bytes, names: list[str]) -> dict[str, str] | None:
    texts, pos = {}, 0
    for name in names:
        end = out.index(b"\n", pos)
        header = out[pos:end].split()
        if len(header) < 3 or header[-1] == b"missing":
            return None
        size = int(header[2])
        try:
            texts[name] = out[end + 1:end + 1 + size].decode("utf-8")
        except UnicodeDecodeError:
            return None
        pos = end + 1 + size + 1
    return texts


# ------------------------------------------------------------------------------------------------ replaying


def apply_edit(text: str, ev: dict[str, Any]) -> str:
    """`text` with the edit `ev` applied; RepocompError when its `removed` is not what the range holds."""
    lines = text.splitlines(keepends=True)
    starts = [0]
    for ln in lines:
        starts.append(starts[-1] + len(ln))

    def offset(line: int, col: int) -> int:
        if line > len(lines) or (line == len(lines) and col):
            raise RepocompError(f"edit position {line}:{col} is past the end of {ev['path']}")
        return starts[line] + col

    a, b = offset(ev["start_line"], ev["start_col"]), offset(ev["end_line"], ev["end_col"])
    if text[a:b] != ev["removed"]:
        raise RepocompError(f"the edit at {ev['path']}:{ev['start_line']} does not apply to the parent's file")
    return text[:a] + ev["inserted"] + text[b:]


def event_states(task: Task, parent_text: Callable[[str], str | None]) -> Iterator[dict[str, str]]:
    """The files opened so far as typed ({path: text}) after each of the task's events, from the parent's files
    (`parent_text`)."""
    texts: dict[str, str] = {}
    for ev in _session(task)["events"]:
        if ev["type"] == "opened":
            src = ev.get("from")
            text = parent_text(src) if src is not None else ""
            if text is None:
                raise RepocompError(f"{task.task_id}: {src} is not in the parent's tree")
            texts[ev["path"]] = text
        elif ev["type"] == "edited":
            texts[ev["path"]] = apply_edit(texts[ev["path"]], ev)
        yield dict(texts)


def typed_texts(task: Task, parent_text: Callable[[str], str | None]) -> dict[str, str]:
    """Every file opened before the hole as typed then ({path: text})."""
    texts: dict[str, str] = {}
    for state in event_states(task, parent_text):
        texts = state
    return texts


def cursor_inside(line: str, where: str) -> tuple[str, str] | None:
    """A cursor inside the hole's `line` (`--mid-line`): (what is typed before it, what stands after it on the
    line), or None where the line has no such place.
    - "word": its indentation, its first word and what stands before that word (`    self` of `    self.x = 1`,
      `@app` of a decorator) typed, nothing after it; something must follow the word;
    - "bracket": typed up to its first opening bracket, whose closer ends the line, and that closer after the cursor
      (as an editor's auto-pairing puts it): `    log = get(` + `)` of `    log = get("x")`; something must
      stand between the two."""
    if where == "word":
        head = _FIRST_WORD.match(line)
        return (head.group(0), "") if head and head.group(0).strip() != line.strip() else None
    span = _first_brackets(line)
    rest = line.rstrip()
    if span is None or span[1] != len(rest) - 1 or not rest[span[0] + 1:-1].strip():
        return None
    return line[:span[0] + 1], line[span[1]]


_FIRST_WORD = re.compile(r"\s*\W*\w+")


def _first_brackets(line: str) -> tuple[int, int] | None:
    """Where the line's first bracket opens and where it closes (strings skipped, a comment ends the code), or
    None when it has none or it does not close on the line."""
    start, depth, quote = -1, 0, ""
    for i, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote and line[i - 1] != "\\" else quote
        elif ch in "\"'":
            quote = ch
        elif ch == "#":
            return None
        elif ch in "([{":
            start = i if start < 0 else start
            depth += 1
        elif ch in ")]}" and start >= 0:
            depth -= 1
            if depth == 0:
                return start, i
    return None


def session_buffer(session: dict[str, Any], typed: str = "") -> str:
    """The hole's buffer as the editor has it: the typed lines above, the hole line (empty, or the `typed` start of
    it), the code below."""
    if "after_hole" not in session:
        raise RepocompError("the task has no after_hole (made before tasks carried the code after the cursor): "
                            "make the tasks again with `repocomp eval make-tasks --kind session`")
    after = session["after_hole"]
    return session["before_hole"] + typed + ("\n" + after if after else "")


def _session(task: Task) -> dict[str, Any]:
    session = task.metadata.get("session")
    if not isinstance(session, dict) or not {"commit", "parent", "before_hole", "files", "events"} <= set(session):
        raise RepocompError(f"{task.source or task.task_id}: a session task needs metadata.session with commit, "
                            "parent, before_hole, files and events")
    return session


def memory_factory(config: Config) -> Callable[[], Any]:
    """A maker of fresh, unsaved `SessionMemory`s with the run's `[memory]` settings, switched on (the session
    tasks measure it; `--no-memory` runs without)."""
    from repocomp.memory.session import SessionMemory

    mem_config = dataclasses.replace(config.memory, enabled=True)
    return lambda: SessionMemory(None, mem_config, store=None)


@dataclass(frozen=True)
class _TextEdit:
    path: str
    start_line: int
    start_col: int
    end_line: int
    end_col: int
    removed: str
    inserted: str
    time: float


def replay_events(memory: Any, task: Task, parent_text: Callable[[str], str | None], now: float) -> int:
    """Feed the task's events to `memory`, the last one a second before `now`; the number of events."""
    try:
        from repocomp.memory.events import TextEdit
    except ImportError:  # a stand-in memory (tests) while the package is not there: the contract's fields
        TextEdit = _TextEdit  # type: ignore[misc,assignment]

    events = _session(task)["events"]
    base = now - 1.0 - (events[-1]["time"] if events else 0.0)
    for ev in events:
        if ev["type"] == "opened":
            src = ev.get("from")
            memory.opened(ev["path"], (parent_text(src) or "") if src is not None else "", base + ev["time"])
        elif ev["type"] == "edited":
            memory.edited(TextEdit(path=ev["path"], start_line=ev["start_line"], start_col=ev["start_col"],
                                   end_line=ev["end_line"], end_col=ev["end_col"], removed=ev["removed"],
                                   inserted=ev["inserted"], time=base + ev["time"]))
    return len(events)


class SessionEvaluator:
    """The session tasks of one parent tree against its index: the index holds the typed files of each task."""

    def __init__(self, root: Path, index: Any, completer: Any, options: EvalOptions,
                 memory: Callable[[], Any] | None):
        self.root = root
        self.index = index
        self.completer = completer
        self.options = options
        self.memory = memory
        self._changed: set[str] = set()
        self._removed: set[str] = set()

    def parent_text(self, rel: str) -> str | None:
        from repocomp.index.walk import decode_source, read_regular

        path = self.root / rel
        if not path.resolve().is_relative_to(self.root.resolve()):
            return None
        data, _ = read_regular(path, _MAX_FILE_BYTES * 4)
        return decode_source(data)[0] if data is not None else None

    async def run(self, tasks: list[Task], on_record: Callable[[dict[str, Any]], None]) -> None:
        from repocomp.pipeline import CompletionOptions  # loaded with the completer

        try:
            for task in sorted(tasks, key=lambda t: (_session(t)["commit"], _session(t)["hunk"], t.line_no)):
                t0 = time.perf_counter()
                try:
                    session = _session(task)
                    texts = typed_texts(task, self.parent_text)
                    before = session["before_hole"]
                    if not texts.get(task.path, "").startswith(before) or before.count("\n") != task.line_no:
                        raise RepocompError(f"{task.task_id}: before_hole is not the typed file up to line_no")
                    # the hole's file up to the hole, as the line tasks see it, or the editor's whole buffer; with
                    # --mid-line the cursor inside the hole's line (`cursor_inside`)
                    place = cursor_inside(task.ground_truth, self.options.mid_line) if self.options.mid_line \
                        else ("", "")
                    if place is None:  # run_eval leaves such holes out
                        raise RepocompError(f"{task.task_id}: no place for --mid-line {self.options.mid_line}")
                    typed, after = place
                    buffer = session_buffer(session, typed + after) if self.options.editor else before + typed
                    texts[task.path] = buffer
                    removed = {f["from"] for f in session["files"] if f.get("status") == "R" and f.get("from")}
                    self._set_state(texts, removed - set(texts))
                    memory = None
                    n_events = 0
                    if self.options.memory and self.memory is not None:
                        memory = self.memory()
                        n_events = replay_events(memory, task, self.parent_text, time.time())
                    self.completer.memory = memory
                    with counting() as counts:
                        summary_ms = await self._summarize(memory)
                        t1 = time.perf_counter()
                        options = CompletionOptions(
                            mode=self.options.mode,
                            oracle_text=task.ground_truth if self.options.mode == "oracle" else None,
                            kind=COMPLETION_KIND.get(task.kind, "line"),
                            context_start_line=task.context_start_lineno, trace=True)
                        result = await self.completer.acomplete(task.path, buffer, task.line_no, len(typed), options)
                except RepocompError as exc:
                    on_record({**error_record(task, self.options, str(exc)),
                               **session_fields(task, self.options, False, 0)})
                    continue
                t2 = time.perf_counter()
                if typed:  # the line as the developer would have it: what was typed, the answer, what stood after it
                    result = dataclasses.replace(result, text=typed + result.text + after)
                record = make_record(task, result, self.options, {"no_leak_update": round((t1 - t0) * 1e3, 3),
                                                                  "summary": summary_ms,
                                                                  "task_total": round((t2 - t0) * 1e3, 3)})
                decision = getattr(result, "memory", None)  # the memory controller's choice, when the engine says
                on_record({**record, **session_fields(task, self.options, memory is not None, n_events),
                           **memory_fields(task.ground_truth, decision),
                           **(counts_fields(counts) if self.options.generation_cache else {})})
        finally:
            self.completer.memory = None
            self._set_state({}, set())

    async def _summarize(self, memory: Any) -> float:
        """With `[memory] summaries`: the idle time before the hole, in which the model folds the settled hunks
        into the session's summary (as the language server does); its milliseconds."""
        if memory is None or getattr(memory, "summary", None) is None:
            return 0.0
        from repocomp.memory.summaries import write_summary

        t0 = time.perf_counter()
        await write_summary(memory.summary, memory.hunks(), self.completer.backend)
        return round((time.perf_counter() - t0) * 1e3, 3)

    def _set_state(self, texts: dict[str, str], removed: set[str]) -> None:
        """The index holds `texts` and lacks `removed`; every other file is the parent's (from disk)."""
        changes: dict[str, str | None] = {p: None for p in (self._changed | self._removed) - set(texts) - removed}
        changes.update(texts)
        if changes:
            if hasattr(self.index, "update_files"):
                self.index.update_files(changes)
            else:
                for p, t in changes.items():
                    self.index.update_file(p, text=t)
        for p in sorted(removed - self._removed):
            self.index.remove_file(p)
        self._changed, self._removed = set(texts), set(removed)


def default_session_engine(options: EvalOptions) -> EngineFactory:
    """An engine factory for parent trees that makes the run's backend once (a model is loaded once)."""
    backend_box: list[Any] = []

    def factory(root: Path, config: Config, opts: EvalOptions) -> tuple[Any, Any]:
        from repocomp.index import Index
        from repocomp.pipeline import Completer

        if not backend_box:
            backend = None
            if options.backend != "none":
                backend = eval_backend(config.backend, options.generation_cache)
            backend_box.append(backend)
        index = Index.open(root, config)
        return index, Completer(index, config, backend=backend_box[0])

    return factory


def run_session_tasks(tasks: list[Task], repos_dir: Path, options: EvalOptions, config: Config,
                      on_record: Callable[[dict[str, Any]], None],
                      engine_factory: EngineFactory | None = None,
                      trees_dir: Path | None = None) -> None:
    """Evaluate session tasks (see the module's docstring), one parent tree at a time; with `options.memory` the
    session memory is on whatever `[memory] enabled` says (it is what these tasks measure)."""
    if options.memory:
        config = config.replace("memory", enabled=True)
    memory = memory_factory(config) if options.memory else None
    factory = engine_factory or default_session_engine(options)
    groups: dict[tuple[str, str], list[Task]] = {}
    for task in tasks:
        s = _session(task)
        groups.setdefault((task.repo, s["parent"]), []).append(task)
    histories: dict[str, Path] = {}
    for (repo, parent), group in sorted(groups.items()):
        if repo not in histories:
            histories[repo] = find_history(repos_dir, repo)
        root = materialize(histories[repo], repo, parent, trees_dir)
        index, completer = factory(root, config, options)
        try:
            asyncio.run(SessionEvaluator(root, index, completer, options, memory).run(group, on_record))
        finally:
            close = getattr(index, "close", None)
            if callable(close):
                close()


__all__ = [
    "SESSION_KIND",
    "SessionEvaluator",
    "apply_edit",
    "commit_changes",
    "event_states",
    "find_history",
    "hole_line_ok",
    "is_source",
    "make_session_tasks",
    "materialize",
    "memory_factory",
    "open_history",
    "replay_events",
    "run_session_tasks",
    "session_buffer",
    "typed_texts",
]
