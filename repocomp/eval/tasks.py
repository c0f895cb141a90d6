"""RepoEval tasks: load RepoEval's JSONL format, and make tasks from a repository after its protocol.

Format (one object per line): `prompt` (the in-file left context, lines [context_start_lineno, hole)) and
`metadata` with `task_id`, `ground_truth`, `fpath_tuple` (element 0 = the repository folder, the rest its path),
`context_start_lineno`, and `line_no` (line/API level) or `lineno` (function level). Tasks made here also carry
`kind`, `language` (the hole's file's, `graph.languages` names; a task without one is read by its path) and, for
API tasks, `api_definitions` (a list of `{path, line_no}`, 0-indexed, path relative to the repo).

Line and API tasks are made from every language the index parses; function tasks from Python files only.
"""

from __future__ import annotations

import json
import os
import random
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from graph.languages import CLASS_KINDS, DEFINITION_KINDS, available, language_for, parser_for, spec
from graph.lookup import DefRef, SymbolLookup
from graph.parsing import ParsedFile, parse_source
from graph.resolve import Resolver, make_symbols
from repocomp.config.schema import Config
from repocomp.errors import RepocompError
from repocomp.index.walk import FileRule, addressable, open_regular, walk_repository

KINDS = ("line", "api", "function")
# tasks made from a repository's history (repocomp.eval.session_tasks): a line typed in a replayed commit
SESSION_KIND = "session"
# the completion kind the engine post-processes a task's output for
COMPLETION_KIND = {"line": "line", "api": "statement", "function": "function", SESSION_KIND: "line"}

_SKIP_DIRS = {".git", ".hg", ".svn", ".repocomp", "__pycache__", "node_modules", ".venv", "venv", ".tox",
              "build", "dist", ".eggs", "site-packages"}
# tasks are made from the files an evaluation's index holds (the eval's default config)
_ALL_CONFIG = Config()
_CONFIG = _ALL_CONFIG.replace("index", languages=("python",))
ALL_LANGUAGES = "all"  # make_tasks(language=...): every language of the repository
_TOKEN_RE = re.compile(r"\w+|[^\w\s]")
_MAX_TASK_LINE_BYTES = 16 << 20  # one task's JSON line


@dataclass
class Task:
    task_id: str
    repo: str  # folder name under --repos (fpath_tuple[0])
    path: str  # POSIX path of the hole's file relative to the repository root
    prompt: str
    ground_truth: str
    line_no: int  # 0-indexed first line of the hole
    context_start_lineno: int = 0
    kind: str = "line"
    api_definitions: list[dict[str, Any]] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)  # the task's metadata as read (extra keys kept)
    source: str = ""  # "FILE:LINE" the task was read from, for messages
    language: str = ""  # the file's language (graph.languages names); "" when neither the task nor its path says

    def to_json(self) -> dict[str, Any]:
        """RepoEval's format (`lineno` for function tasks, `line_no` otherwise), plus `kind`/`api_definitions`."""
        md = {k: v for k, v in self.metadata.items() if k not in ("line_no", "lineno")}
        md.update(task_id=self.task_id, ground_truth=self.ground_truth,
                  fpath_tuple=[self.repo, *PurePosixPath(self.path).parts],
                  context_start_lineno=self.context_start_lineno, kind=self.kind)
        md["lineno" if self.kind == "function" else "line_no"] = self.line_no
        if self.language:
            md["language"] = self.language
        if self.api_definitions:
            md["api_definitions"] = self.api_definitions
        return {"prompt": self.prompt, "metadata": md}


def estimate_tokens(text: str) -> int:
    """A code-aware token estimate (words and punctuation), close to BPE counts for code."""
    return len(_TOKEN_RE.findall(text))


# --------------------------------------------------------------------------------------------------- loading


def _guess_kind(md: dict[str, Any], source: str) -> str:
    kind = md.get("kind")
    if kind in KINDS or kind == SESSION_KIND:
        return kind
    if "lineno" in md and "line_no" not in md:
        return "function"
    if md.get("api_definitions") or "api" in source.lower():
        return "api"
    return "line"


def _field_int(md: dict[str, Any], key: str) -> int:
    value = md[key]
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{key} must be a line number (an integer >= 0), got {value!r}")
    return value


def _field_str(obj: dict[str, Any], key: str) -> str:
    value = obj[key]
    if not isinstance(value, str):
        raise ValueError(f"{key} must be a string, got {value!r}")
    return value


def _fpath(value: Any) -> tuple[str, str]:
    """(repository folder, POSIX path in it) of `fpath_tuple`; a path that could leave --repos is an error."""
    if not isinstance(value, list) or len(value) < 2 or not all(isinstance(p, str) for p in value):
        raise ValueError(f"fpath_tuple must list the repository folder and the file's path parts, got {value!r}")
    repo, *rest = value
    parts = [seg for part in rest for seg in part.split("/")]
    for seg in [repo, *parts]:
        if seg in ("", ".", "..") or "/" in seg or "\\" in seg or not addressable(seg):
            raise ValueError(f"fpath_tuple {value!r} must name a file inside the repository folder "
                             "(no absolute paths, '..', empty parts or control characters)")
    return repo, "/".join(parts)


def _definitions(value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(
            isinstance(d, dict) and isinstance(d.get("path"), str) and isinstance(d.get("line_no"), int)
            and not isinstance(d.get("line_no"), bool) for d in value):
        raise ValueError(f"api_definitions must be a list of {{path, line_no}}, got {value!r}")
    return [dict(d) for d in value]


def _parse_task(line: str, where: str, kind: str | None, source_name: str) -> Task:
    obj = json.loads(line)
    if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
        raise ValueError("expected an object with prompt and metadata")
    md = obj["metadata"]
    for key in ("task_id", "ground_truth", "fpath_tuple"):
        if key not in md:
            raise KeyError(key)
    if "line_no" not in md and "lineno" not in md:
        raise KeyError("line_no or lineno")
    if not isinstance(md["task_id"], (str, int)) or isinstance(md["task_id"], bool):
        raise ValueError(f"task_id must be a string, got {md['task_id']!r}")
    repo, path = _fpath(md["fpath_tuple"])
    line_no = _field_int(md, "line_no" if "line_no" in md else "lineno")
    start = _field_int(md, "context_start_lineno") if "context_start_lineno" in md else 0
    if start > line_no:
        raise ValueError(f"context_start_lineno {start} is after the hole's line {line_no}")
    language = md.get("language")
    if language is not None and not isinstance(language, str):
        raise ValueError(f"language must be a string, got {language!r}")
    return Task(task_id=str(md["task_id"]), repo=repo, path=path, prompt=_field_str(obj, "prompt"),
                ground_truth=_field_str(md, "ground_truth"), line_no=line_no, context_start_lineno=start,
                kind=kind or _guess_kind(md, source_name),
                api_definitions=_definitions(md.get("api_definitions")), metadata=dict(md), source=where,
                language=language or language_for(path) or "")


def load_tasks(path: str | os.PathLike[str], kind: str | None = None) -> list[Task]:
    """Read a RepoEval JSONL file. Task ids that occur more than once get `#<line index>` appended.

    Every task is checked here (types, line numbers, a path that stays inside its repository folder); a bad
    one is reported with its line number."""
    path = Path(path)
    fh, reason = open_regular(path)
    if fh is None:
        why = "not a regular file" if reason == "not_regular" else "missing or unreadable"
        raise RepocompError(f"cannot read tasks file {path}: {why}")
    tasks: list[tuple[int, Task]] = []
    with fh:  # a line at a time, each bounded: memory stays proportional to the tasks, whatever the file holds
        for i, raw in enumerate(iter(lambda: fh.readline(_MAX_TASK_LINE_BYTES + 1), b"")):
            if len(raw) > _MAX_TASK_LINE_BYTES:
                raise RepocompError(f"{path}:{i + 1}: a task longer than {_MAX_TASK_LINE_BYTES >> 20} MiB; a RepoEval "
                                    "task is a prompt of a few thousand tokens")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise RepocompError(f"tasks file {path} is not UTF-8 text (line {i + 1}, byte {exc.start}); JSONL "
                                    "must be UTF-8") from None
            if not line.strip():
                continue
            try:
                tasks.append((i, _parse_task(line, f"{path}:{i + 1}", kind, path.name)))
            except (json.JSONDecodeError, KeyError) as exc:
                raise RepocompError(f"{path}:{i + 1}: not a RepoEval task ({exc}); expected prompt and metadata "
                                    "with task_id, ground_truth, fpath_tuple, line_no or lineno") from None
            except ValueError as exc:
                raise RepocompError(f"{path}:{i + 1}: bad task: {exc}") from None
    counts = Counter(t.task_id for _, t in tasks)
    for i, t in tasks:
        if counts[t.task_id] > 1:
            t.task_id = f"{t.task_id}#{i}"
    return [t for _, t in tasks]


def check_paths(tasks: Iterable[Task], repos_dir: Path) -> None:
    """Each task's file must resolve (symlinks followed) inside its repository folder inside `repos_dir`."""
    top = repos_dir.resolve()
    for task in tasks:
        root = (repos_dir / task.repo).resolve()
        target = (repos_dir / task.repo / task.path).resolve()
        if not (root.is_relative_to(top) and target.is_relative_to(root)):
            raise RepocompError(f"{task.source or task.task_id}: {task.repo}/{task.path} resolves outside "
                                f"--repos {repos_dir} (a symlink?); the task is rejected")


def write_tasks(tasks: Iterable[Task], path: str | os.PathLike[str]) -> int:
    n = 0
    with open(path, "w", encoding="utf-8") as fh:
        for task in tasks:
            fh.write(json.dumps(task.to_json()) + "\n")
            n += 1
    return n


# ---------------------------------------------------------------------------------------------------- making


def iter_python_files(root: Path) -> Iterator[str]:
    """POSIX paths (relative to root, sorted) of the Python files the index holds (the build's walk, so its
    `FileRule`), less hidden folders and build copies (a `build/lib` copy of the hole's file would leak it)."""
    return iter(path for path, _ in iter_source_files(root, ("python",)))


def iter_source_files(root: Path, languages: Iterable[str] | None = None) -> Iterator[tuple[str, str]]:
    """(POSIX path, language) of the files the index holds in `languages` (None: every indexed language),
    sorted by path, less hidden folders and build copies; Python files are `.py` ones (no `.pyi` stubs)."""
    wanted = set(languages) if languages is not None else None
    config = _ALL_CONFIG if wanted is None else _ALL_CONFIG.replace(
        "index", languages=tuple(lang for lang in _ALL_CONFIG.index.languages if lang in wanted))
    walked = walk_repository(Path(root), config)
    return iter(sorted((f.path, f.language) for f in walked.files
                       if (f.language != "python" or f.path.endswith(".py"))
                       and not any(d in _SKIP_DIRS or d.startswith(".") for d in f.path.split("/")[:-1])))


def repository_languages(root: Path) -> Counter[str]:
    """How many files of each language the task maker would read in the repository."""
    return Counter(language for _, language in iter_source_files(root))


def pick_languages(root: Path, language: str | None) -> tuple[str, ...]:
    """The languages `make_tasks` reads: `language` itself, every one (`"all"`), or (None) the repository's
    dominant one: the language of most files (ties: the first name in alphabetical order; none: Python)."""
    if language == ALL_LANGUAGES:
        return tuple(sorted(repository_languages(root))) or ("python",)
    if language is not None:
        if language not in available():
            raise RepocompError(f"unknown language {language!r}; use one of {', '.join(available())} or all")
        return (language,)
    counts = repository_languages(root)
    if not counts:
        return ("python",)
    return (min(counts, key=lambda lang: (-counts[lang], lang)),)


def _parser():
    import tree_sitter_python
    from tree_sitter import Language, Parser

    return Parser(Language(tree_sitter_python.language()))


def _read_lines(rule: FileRule, rel: str) -> list[str] | None:
    """A file's lines as the index reads it; None when the index leaves it out or it is not UTF-8 (a task's text
    must be the file's own, not one with replacement characters)."""
    source, note = rule.read(rel)
    return source.text.splitlines() if source is not None and note is None else None


def _prompt_for(lines: list[str], hole: int, budget: int) -> tuple[str, int]:
    """The hole's preceding lines, as many as fit `budget` estimated tokens; returns (prompt, first line)."""
    start, used = hole, 0
    while start > 0:
        cost = estimate_tokens(lines[start - 1]) + 1
        if used + cost > budget and start < hole:
            break
        used += cost
        start -= 1
    return "\n".join(lines[start:hole]), start


def _walk(node) -> Iterator[Any]:
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


def _text(node) -> str:
    return node.text.decode("utf-8", "replace")


def _string_rows(node, last: int) -> range:
    """The rows a string node (ending on row `last`) takes from code: all of a bare string statement (a docstring,
    `'use strict';`), else the inside of a multi-line string (none for a one-line one)."""
    first, parent = node.start_point.row, node.parent
    if parent is not None and parent.type == "expression_statement" and parent.named_child_count == 1:
        return range(first, last + 1)
    return range(first + 1, last + 1)


def _non_code_rows(tree) -> set[int]:
    """Rows that hold only a docstring or the inside of a multi-line string."""
    rows: set[int] = set()
    for node in _walk(tree.root_node):
        if node.type == "string":
            rows.update(_string_rows(node, node.end_point.row))
    return rows


def _line_candidates(rel: str, lines: list[str], tree) -> Iterator[tuple[int, int, str]]:
    skip = _non_code_rows(tree)
    for i in range(1, len(lines)):
        s = lines[i].strip()
        if not s or s.startswith("#") or i in skip or not lines[i - 1].strip():
            continue
        yield i, i + 1, lines[i]


# -- the other languages: the same rules, by their tree-sitter node kinds

_NO_WORD = re.compile(r"^\W*$")  # a line of brackets and punctuation only: `}`, `});`, `]`, `{`


def _is_comment(node) -> bool:
    return "comment" in node.type


def _is_string(node) -> bool:
    return node.is_named and ("string" in node.type or node.type == "text_block")


def _last_row(node) -> int:
    """The node's last row (a Rust line comment holds its newline: it ends at column 0 of the next row)."""
    end_row, end_col = node.end_point
    return end_row - 1 if end_col == 0 and end_row > node.start_point.row else end_row


def _non_code_rows_other(tree, lines: list[str]) -> set[int]:
    """Rows that hold only a comment, a bare string statement (`'use strict';`) or the inside of a multi-line
    string (a template literal, a raw string, a Java text block): `_non_code_rows` for the brace languages."""
    rows: set[int] = set()
    for node in _walk(tree.root_node):
        first, last = node.start_point.row, _last_row(node)
        if _is_comment(node):
            line = lines[first] if first < len(lines) else ""
            if node.start_point.column <= len(line) - len(line.lstrip()):  # the comment begins its line
                rows.add(first)
            rows.update(range(first + 1, last + 1))
        elif _is_string(node):
            rows.update(_string_rows(node, last))
    return rows


def _code_line_candidates(rel: str, lines: list[str], tree) -> Iterator[tuple[int, int, str]]:
    """Python's line rule for the other languages: a code line (not blank, not a comment, not inside a
    multi-line string or comment, not brackets and punctuation alone) whose previous line is not blank."""
    skip = _non_code_rows_other(tree, lines)
    for i in range(1, len(lines)):
        s = lines[i].strip()
        if not s or i in skip or not lines[i - 1].strip() or _NO_WORD.match(s):
            continue
        yield i, i + 1, lines[i]


def _function_candidates(rel: str, lines: list[str], tree) -> Iterator[tuple[int, int, str, str]]:
    for node in _walk(tree.root_node):
        if node.type != "function_definition":
            continue
        body = node.child_by_field_name("body")
        if body is None or body.named_child_count == 0:
            continue
        stmts = [c for c in body.named_children if c.type != "comment"]
        if not stmts:
            continue
        first = stmts[0]
        if first.type == "expression_statement" and first.named_child_count == 1 \
                and first.named_children[0].type == "string":
            if len(stmts) < 2:
                continue
            first = stmts[1]
        start, end = first.start_point.row, node.end_point.row + 1
        if start <= node.start_point.row or lines[start].strip() == "" or \
                first.start_point.column != len(lines[start]) - len(lines[start].lstrip()):
            continue
        if sum(1 for ln in lines[start:end] if ln.strip()) < 3:
            continue
        name = node.child_by_field_name("name")
        yield start, end, "\n".join(lines[start:end]) + "\n", _text(name) if name is not None else ""


# -- API tasks: a statement calling a function, class or method defined in another file of the repository


class _ApiResolver:
    """Where a call goes, by the product's own rules: `graph.resolve`'s symbols of every file, read through
    `graph.lookup.SymbolLookup` (imports, re-exports, `self`/`cls` and base classes, `Class.method`), and a
    called method that only one class of the repository defines. So an API task's `api_definitions` are the
    definitions the engine itself can find for that call."""

    def __init__(self, files: dict[str, tuple[list[str], Any]]):
        self.resolver = Resolver()
        for rel, (lines, _) in files.items():
            self.resolver.set_file(make_symbols(rel, parse_source("\n".join(lines), "python")))
        self.lookup = SymbolLookup(self.resolver, lambda path: files[path][0] if path in files else None)
        self.lookup.refresh()

    def resolve_call(self, rel: str, func) -> tuple[str, int] | None:
        """(file, 0-indexed line of the `def`/`class`) that the call's function `func` (a tree-sitter node) names."""
        parts = _dotted_parts(func)
        if parts is None:
            return None
        target = self.lookup.resolve(rel, parts, func.start_point.row).last
        if target is None and len(parts) >= 2:  # `obj.method()` with `obj` of unknown type
            target = self.lookup.unique_method(parts[-1])
        if not isinstance(target, DefRef) or target.kind == "constant":
            return None
        return target.path, int(self.resolver.files[target.path].parsed.start_line[target.node])


def _dotted_parts(func) -> tuple[str, ...] | None:
    """`a.b.c` of a call's function node; None for anything else (`f()()`, `x[0].m()`, `super().m()`)."""
    parts = []
    node = func
    while node is not None and node.type == "attribute":
        parts.append(_text(node.child_by_field_name("attribute")))
        node = node.child_by_field_name("object")
    if node is None or node.type != "identifier":
        return None
    parts.append(_text(node))
    return tuple(reversed(parts))


_SIMPLE_STATEMENTS = {"expression_statement", "return_statement", "assert_statement", "raise_statement",
                      "delete_statement"}
_COMPOUND_HEADERS = {"if_statement", "elif_clause", "for_statement", "while_statement", "with_statement"}


def _api_candidates(rel: str, lines: list[str], tree, calls: _ApiResolver, max_lines: int
                    ) -> Iterator[tuple[int, int, str, list[dict[str, Any]]]]:
    found: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for node in _walk(tree.root_node):
        if node.type != "call":
            continue
        target = calls.resolve_call(rel, node.child_by_field_name("function"))
        if target is None or target[0] == rel:
            continue
        stmt = node.parent
        while stmt is not None and stmt.type not in _SIMPLE_STATEMENTS and stmt.type not in _COMPOUND_HEADERS \
                and not stmt.type.endswith("definition") and stmt.type not in ("block", "module"):
            stmt = stmt.parent
        if stmt is None:
            continue
        if stmt.type in _SIMPLE_STATEMENTS:
            start, end = stmt.start_point.row, stmt.end_point.row + 1
        elif stmt.type in _COMPOUND_HEADERS:  # a call in the header of `if`/`for`/`with`...: the header lines
            body = stmt.child_by_field_name("body") or stmt.child_by_field_name("consequence")
            if body is None or body.start_point.row <= stmt.start_point.row \
                    or node.start_point.row >= body.start_point.row:
                continue
            start, end = stmt.start_point.row, body.start_point.row
        else:
            continue
        if end - start > max_lines or start == 0:
            continue
        if stmt.start_point.column != len(lines[start]) - len(lines[start].lstrip()):
            continue  # the statement does not begin its line
        defs = found.setdefault((start, end), [])
        entry = {"path": target[0], "line_no": target[1]}
        if entry not in defs:
            defs.append(entry)
    for (start, end), defs in sorted(found.items()):
        yield start, end, "\n".join(lines[start:end]), defs


# -- API tasks in the other languages: the index's own call edges (graph.resolve.Resolver, as Index.build runs it)


class _IndexCalls:
    """Every indexed file parsed and resolved as `Index.build` does it (`parse_source`, `make_symbols`,
    `Resolver.resolve`), without the index's fragments and relations: a call edge (calling statement, target
    definition) is what the engine itself follows, so resolution improvements reach the tasks unchanged."""

    def __init__(self, root: Path):
        rule = FileRule(root, _ALL_CONFIG)
        self.parsed: dict[str, ParsedFile] = {}
        self.resolver = Resolver()
        for rel, language in iter_source_files(root):
            source, _note = rule.read(rel)
            if source is None:
                continue
            # the lines the task maker reads (`str.splitlines`), so that rows agree with the tasks' line numbers
            parsed = parse_source("\n".join(source.text.splitlines()), language)
            self.parsed[rel] = parsed
            self.resolver.set_file(make_symbols(rel, parsed))

    def edges(self, rel: str) -> list[tuple[int, str, int]]:
        """(calling local node, target file, target local node) of the file's calls."""
        return self.resolver.resolve(rel) if rel in self.parsed else []

    def definition_line(self, path: str, node: int) -> int:
        return int(self.parsed[path].start_line[node])


def _line_start_node(tree, lines: list[str], row: int, kind: str, last_row: int):
    """The tree-sitter node of kind `kind` that begins line `row` (at its indentation) and ends on `last_row`."""
    indent = len(lines[row]) - len(lines[row].lstrip())
    node = tree.root_node.descendant_for_point_range((row, indent), (row, indent))
    while node is not None and node.start_point == (row, indent):
        if node.type == kind and _last_row(node) == last_row:
            return node
        node = node.parent
    return None


_STATEMENT_END = re.compile(r"^[;,]*\s*(//.*)?$")


def _graph_api_hole(lines: list[str], tree, parsed: ParsedFile, node: int, rows: set[int], max_lines: int
                    ) -> tuple[int, int] | None:
    """The hole for a call edge from graph node `node` whose calls lie on `rows`: the statement (climbing to the
    one that begins its line) when it has at most `max_lines` lines, no statement inside it, and ends its last
    line; else the one line that holds every call of the node (the header of `if foo(x) {`, `.map(f)` in a long
    chain, a Rust tail expression `helper(x)` of a function), never a definition's first line."""
    kinds, starts, ends, parents = parsed.kinds, parsed.start_line, parsed.end_line, parsed.parent
    single = next(iter(rows)) if len(rows) == 1 else None
    stmt = node
    while stmt > 0 and kinds[stmt] not in DEFINITION_KINDS and kinds[stmt] not in CLASS_KINDS:
        s, e = int(starts[stmt]), int(ends[stmt])
        if _line_start_node(tree, lines, s, kinds[stmt], e - 1) is not None:
            break
        parent = int(parents[stmt])
        if parent <= 0 or int(starts[parent]) != s:
            stmt = 0
            break
        stmt = parent
    if stmt <= 0 or kinds[stmt] in DEFINITION_KINDS or kinds[stmt] in CLASS_KINDS:
        # a call no statement of its own holds (a Rust tail expression, a TS arrow body): its line
        if single is None or single == int(starts[node]) or single == 0 or single >= len(lines):
            return None
        return single, single + 1
    s, e = int(starts[stmt]), int(ends[stmt])
    if s == 0 or e > len(lines):
        return None
    ts_node = _line_start_node(tree, lines, s, kinds[stmt], e - 1)
    assert ts_node is not None  # the climb above stopped on it
    nested = False
    for k in range(stmt + 1, len(kinds)):
        if starts[k] >= e:
            break
        if starts[k] > s:
            p = int(parents[k])
            while p > stmt:
                p = int(parents[p])
            if p == stmt:
                nested = True
                break
    tail = lines[e - 1].encode("utf-8", "surrogatepass")[ts_node.end_point.column:].decode("utf-8", "replace")
    if e - s <= max_lines and not nested and _STATEMENT_END.match(tail.strip()):
        return s, e
    if single is not None and single < len(lines):
        return single, single + 1  # every call of the statement is on this line
    return None


def _graph_api_candidates(rel: str, lines: list[str], tree, language: str, calls: _IndexCalls, max_lines: int
                          ) -> Iterator[tuple[int, int, str, list[dict[str, Any]]]]:
    """A statement with a call the index resolves into another file (`_graph_api_hole`); `api_definitions`
    lists what its calls reach."""
    parsed = calls.parsed.get(rel)
    if parsed is None:
        return
    edges = [e for e in calls.edges(rel) if e[1] != rel]
    if not edges:
        return
    from tree_sitter import QueryCursor

    call_rows: dict[int, set[int]] = {}
    for callee in QueryCursor(spec(language).call_query).captures(tree.root_node).get("callee", []):
        row = callee.start_point.row
        if row < parsed.n_lines:
            call_rows.setdefault(int(parsed.line_owner[row]), set()).add(row)
    found: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for node, target_path, target_node in edges:
        hole = _graph_api_hole(lines, tree, parsed, node, call_rows.get(node, set()), max_lines)
        if hole is None:
            continue
        defs = found.setdefault(hole, [])
        entry = {"path": target_path, "line_no": calls.definition_line(target_path, target_node)}
        if entry not in defs:
            defs.append(entry)
    for (start, end), defs in sorted(found.items()):
        yield start, end, "\n".join(lines[start:end]), defs


def make_tasks(repo: str | os.PathLike[str], kind: str, n: int = 200, seed: int = 0, *,
               prompt_tokens: int = 2000, max_api_lines: int = 5, language: str | None = None) -> list[Task]:
    """Up to `n` tasks of `kind` from the repository at `repo`, chosen at random with `seed` (deterministic).

    line: a code line (not blank, not a comment, not inside a docstring or multi-line string; in the brace
    languages not brackets and punctuation alone) whose previous line is not blank; api: a statement calling a
    function, class or method defined in another file of the repository, as the engine resolves the call
    (Python: `graph.lookup` over the Python files; the other languages: the index's call edges;
    `api_definitions` lists the definitions); function: a function body (after its docstring) of at least 3
    non-blank lines (Python files only).
    `language`: a `graph.languages` name, `"all"`, or None for the repository's dominant language
    (`pick_languages`). Tasks with the same stripped ground truth are kept once. The prompt is the file's
    preceding lines, as many as fit `prompt_tokens` estimated tokens.
    """
    if kind not in KINDS:
        raise RepocompError(f"unknown task kind {kind!r}; use one of {', '.join(KINDS)}")
    root = Path(repo)
    if not root.is_dir():
        raise RepocompError(f"repository {root} is not a directory")
    languages = pick_languages(root, language)
    files: dict[str, tuple[list[str], Any]] = {}
    file_language: dict[str, str] = {}
    rule = FileRule(root, _ALL_CONFIG)
    parsers: dict[str, Any] = {}
    for rel, lang in iter_source_files(root, languages):
        lines = _read_lines(rule, rel)
        if lines is None:
            continue
        if lang not in parsers:
            parsers[lang] = _parser() if lang == "python" else parser_for(lang)
        parser = parsers[lang]
        files[rel] = (lines, parser.parse("\n".join(lines).encode("utf-8")))
        file_language[rel] = lang
    calls = None
    index_calls = None
    if kind == "api":
        python_files = {rel: v for rel, v in files.items() if file_language[rel] == "python"}
        calls = _ApiResolver(python_files) if python_files else None
        if len(python_files) < len(files):
            index_calls = _IndexCalls(root)
    candidates: list[tuple[str, int, int, str, dict[str, Any]]] = []
    for rel, (lines, tree) in files.items():
        lang = file_language[rel]
        if kind == "line":
            line_candidates = _line_candidates if lang == "python" else _code_line_candidates
            for s, e, gt in line_candidates(rel, lines, tree):
                candidates.append((rel, s, e, gt, {}))
        elif kind == "function":
            if lang != "python":
                continue
            for s, e, gt, name in _function_candidates(rel, lines, tree):
                candidates.append((rel, s, e, gt, {"function_name": name}))
        elif lang == "python":
            assert calls is not None  # made above when there is a Python file
            for s, e, gt, defs in _api_candidates(rel, lines, tree, calls, max_api_lines):
                candidates.append((rel, s, e, gt, {"api_definitions": defs}))
        else:
            assert index_calls is not None  # made above when there is a file of another language
            for s, e, gt, defs in _graph_api_candidates(rel, lines, tree, lang, index_calls, max_api_lines):
                candidates.append((rel, s, e, gt, {"api_definitions": defs}))
    rng = random.Random(seed)
    rng.shuffle(candidates)
    seen: set[tuple[str, ...]] = set()
    chosen = []
    for cand in candidates:
        key = tuple(ln.strip() for ln in cand[3].splitlines() if ln.strip())
        if key in seen:
            continue
        seen.add(key)
        chosen.append(cand)
        if len(chosen) >= n:
            break
    name = root.resolve().name
    tasks = []
    for k, (rel, s, _e, gt, extra) in enumerate(chosen):
        lines = files[rel][0]
        prompt, start = _prompt_for(lines, s, prompt_tokens)
        defs = extra.pop("api_definitions", [])
        md = {"seed": seed, **extra}
        tasks.append(Task(task_id=f"{name}/{kind}/{k}", repo=name, path=rel, prompt=prompt, ground_truth=gt,
                          line_no=s, context_start_lineno=start, kind=kind, api_definitions=defs, metadata=md,
                          language=file_language[rel]))
    return tasks
