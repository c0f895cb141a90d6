"""`repocomp complete FILE:LINE[:COL]`: complete code at a position of a file in an indexed repository.

LINE and COL are 1-based as editors show them (COL defaults to the end of the line). The completion goes to
stdout; which backend answered (and why a fallback did) goes to stderr, or into the JSON with `--json`.
`--explain` prints, for each round, the query, the draft and the fragments retrieved with their scores and the
graph edge types that relate each to the cursor's own fragment, then the definitions ranked for the final round:
the lines each shows, its score, whether it made the prompt and why it was chosen ("imported at line 7,
referenced at line 98, prefix match").
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import re
import sys
from pathlib import Path
from typing import Any

from repocomp.config.schema import BACKEND_NAMES, MODES
from repocomp.errors import RepocompError
from repocomp.text import encodable

# a version-control folder, repocomp's own files, or a language's project manifest (a downloaded project has no .git)
_ROOT_MARKERS = (".git", ".repocomp", "repocomp.toml", "pyproject.toml", "setup.py", "package.json", "go.mod",
                 "Cargo.toml", "pom.xml", "build.gradle", "build.gradle.kts")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("complete", help="complete code at FILE:LINE[:COL] using the repository as context",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("position", metavar="FILE:LINE[:COL]", help="1-based line and column (default: end of line)")
    p.add_argument("--backend", choices=BACKEND_NAMES, help="override [backend] name")
    p.add_argument("--iterations", type=int, metavar="N", help="RepoCoder rounds (1 = vanilla)")
    p.add_argument("--mode", choices=[m for m in MODES if m != "oracle"], default="repocoder")
    p.add_argument("--no-fragrel", action="store_true",
                   help="plain RepoCoder: similarity alone (no FragRel, no query-side relations, no definitions)")
    p.add_argument("--no-definitions", action="store_true", help="no definitions section in the prompt")
    p.add_argument("--explain", action="store_true", help="show each round's fragments, scores and relations")
    p.add_argument("--json", action="store_true", help="print the whole result as JSON")
    p.add_argument("--config", type=Path, metavar="FILE", help="repocomp TOML config (default: the repo's)")
    p.set_defaults(run=run)


def parse_position(spec: str) -> tuple[Path, int, int | None]:
    m = re.fullmatch(r"(.+?):(\d{1,18})(?::(\d{1,18}))?", spec)  # past 18 digits no file has the line (int() fails)
    if m is None:
        shown = spec if len(spec) <= 200 else spec[:200] + "..."
        raise RepocompError(f"{shown!r} is not FILE:LINE[:COL] (1-based line and column)")
    line, col = int(m.group(2)), (int(m.group(3)) if m.group(3) else None)
    if line < 1 or (col is not None and col < 1):
        raise RepocompError(f"{spec!r}: LINE and COL are 1-based")
    return Path(m.group(1)), line, col


def find_root(start: Path) -> Path:
    """The nearest folder at or above `start` holding one of `_ROOT_MARKERS`."""
    for folder in (start, *start.parents):
        if any((folder / marker).exists() for marker in _ROOT_MARKERS):
            return folder
    raise RepocompError(f"no repository found above {start} (looked for {', '.join(_ROOT_MARKERS)}); "
                        "run from inside a repository or create a repocomp.toml at its root")


def run(args: argparse.Namespace) -> int:
    from repocomp.config.loading import load_config

    file, line1, col1 = parse_position(args.position)
    file = file.expanduser().resolve()
    if not file.is_file():
        raise RepocompError(f"{file}: no such file")
    root = find_root(file.parent)
    config = load_config(root, args.config)
    if args.backend:
        config = config.replace("backend", name=args.backend)
    if args.iterations is not None:
        if args.iterations < 1:
            raise RepocompError("--iterations must be >= 1")
        config = config.replace("retrieval", iterations=args.iterations)
    if args.no_fragrel:
        config = config.plain_repocoder()
    from repocomp.backends.model_defaults import resolve_config

    chosen = resolve_config(config)  # what "auto" became, the model's defaults made concrete
    from repocomp.index.walk import read_text_file

    text = read_text_file(file, config.index.max_file_bytes)  # as the indexer reads it (FIFOs never)
    lines = text.split("\n")
    if line1 > len(lines):
        raise RepocompError(f"line {line1} is past the end of {file} ({len(lines)} lines)")
    line = line1 - 1
    col = len(lines[line]) if col1 is None else col1 - 1
    if col > len(lines[line]):
        raise RepocompError(f"column {col1} is past the end of line {line1} ({len(lines[line])} characters)")
    rel = file.relative_to(root).as_posix()
    result, left_out = asyncio.run(_complete(root, chosen, rel, text, line, col, args))
    if args.json:
        print(json.dumps(_to_json(result), indent=2))
        return 0
    if args.explain:
        if left_out is not None:
            print(encodable(f"{rel} is not in the index: {left_out}"))
        print(encodable(explain_text(result)))
    sys.stdout.write(encodable(result.text) + ("\n" if not result.text.endswith("\n") else ""))
    from repocomp.backends.local_model import hint_once

    fallback = result.backend != chosen.backend.name  # else the note is only about skipped rounds
    note = f" ({encodable(result.error)}{'; answered by the fallback' if fallback else ''})" if result.error else ""
    print(f"repocomp: completed by the {result.backend} backend{note} in {result.timings_ms.get('total', 0):.0f} ms",
          file=sys.stderr)
    if config.backend.name == "auto" and chosen.backend.name == "extractive":
        hint_once(lambda msg: print(f"repocomp: {msg}", file=sys.stderr))
    return 0


async def _complete(root: Path, config: Any, path: str, text: str, line: int, col: int,
                    args: argparse.Namespace) -> tuple[Any, str | None]:
    """The completion, and why `path` is not in the index (None when it is)."""
    from repocomp.backends import make_backend
    from repocomp.index import Index
    from repocomp.index.walk import partial_index
    from repocomp.pipeline import Completer, CompletionOptions

    told = False

    def progress(done: int, total: int, phase: str) -> None:
        nonlocal told
        if not told:  # Index.open reports progress only while building
            print(f"repocomp: no usable index for {encodable(str(root))} yet; building it (once)...", file=sys.stderr)
            told = True

    index = Index.open(root, config, build=True, progress=progress)
    backend = make_backend(config.backend)
    await backend.aload()  # loading a local model is not part of the completion's deadline
    completer = Completer(index, config, backend, memory=session_memory(root, config))
    left_out = None
    if path not in index.files:  # the request still reads the file itself; the repository's code cannot relate to it
        left_out = partial_index(index.summary.warnings) or (
            "left out by the walk's rules (.gitignore, [index] exclude, its language, size or encoding), or added "
            "since the index was built")
    try:
        options = CompletionOptions(mode=args.mode, explain=args.explain, trace=args.json,
                                    definitions=False if args.no_definitions else None)
        return await completer.acomplete(path, text, line, col, options), left_out
    finally:
        await completer.aclose()


def session_memory(root: Path, config: Any) -> Any:
    """The folder's editing session as the language server left it in the user's cache (read, never written
    here); None when `[memory]` is off or nothing was recorded."""
    if not config.memory.enabled or not config.memory.persist:
        return None
    from repocomp.memory.session import SessionMemory
    from repocomp.memory.store import RecallStore

    store = RecallStore(root, config.memory.store_max_bytes)
    return SessionMemory(root, config.memory, store) if store.path.exists() else None


def memory_text(result: Any) -> list[str]:
    """The session memory's controller for this request: consulted or not, why, and the entries it chose."""
    decision = getattr(result, "memory", None)
    if decision is None:
        return ["session memory: none (no session recorded, or [memory] off)"]
    if not decision.consulted:
        return [f"session memory: not consulted ({encodable(decision.reason)})"]
    out = [f"session memory: consulted ({encodable(decision.reason)}; up to {decision.budget_tokens} tokens)"]
    for e in decision.entries:
        where = f"{e.path}:{e.start_line + 1}" if e.start_line >= 0 else e.path
        first = e.lines[0] if e.lines else ""
        out.append(f"  {e.kind:<8}{encodable(where):<32}{e.score:8.3f}  {'; '.join(e.reasons)}  | {encodable(first)}")
    return out


def retrieval_text(result: Any) -> list[str]:
    """With `[retrieval] selective`: whether the prompt showed the retrieved code, and why."""
    d = getattr(result, "retrieval", None)
    if d is None:
        return []
    verdict = "shown" if d.retrieve else "not shown"
    return [f"retrieved code: {verdict} (most similar to the query: a retrieved fragment {d.repository:.4f}, "
            f"the file above in view {d.in_file:.4f})"]


def explain_text(result: Any) -> str:
    """Per round: query, draft and a table of retrieved fragments (1-based lines as editors show them)."""
    out: list[str] = []
    in_prompt = {b.fragment_id for b in result.context}
    for r, rnd in enumerate(result.rounds, 1):
        out.append(f"== round {r} ==")
        out.append("query:")
        out += [f"  | {q}" for q in rnd.query.split("\n")] if rnd.query else ["  (none)"]
        out.append("draft:")
        out += [f"  | {d}" for d in rnd.draft.split("\n")[:10]] if rnd.draft else ["  (none)"]
        if not rnd.blocks:
            out.append("fragments: none")
            continue
        rows = [(f"{encodable(b.path)}:{b.start_line + 1}-{b.end_line}", f"{b.s_ind:.4f}", f"{b.s_env:.4f}",
                 f"{b.s_rel:.4f}", "yes" if (r == len(result.rounds) and b.fragment_id in in_prompt) else "",
                 ", ".join(b.relations) or "-") for b in rnd.blocks]
        head = ("fragment (lines shown)", "s_ind", "s_env", "s_rel", "prompt", "relations to cursor")
        widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head)]
        out.append("  ".join(h.ljust(w) for h, w in zip(head, widths)))
        out += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in rows]
    out += retrieval_text(result)
    out += definitions_text(result)
    out += memory_text(result)
    out.append(f"backend: {result.backend}" + (f" (fallback; {result.error})" if result.error else ""))
    out.append(f"prompt tokens: {result.prompt_tokens}")
    out.append("-- completion --")
    return "\n".join(out)


def _lines_label(lines: list[int]) -> str:
    """0-based line numbers -> "12-14, 40" (1-based runs)."""
    runs: list[list[int]] = []
    for n in lines:
        if runs and runs[-1][1] == n - 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(f"{a + 1}-{b + 1}" if b > a else f"{a + 1}" for a, b in runs)


def definitions_text(result: Any) -> list[str]:
    """The final round's ranked definitions: where, score, whether in the prompt, and why."""
    defs = getattr(result, "definitions", None) or []
    if not defs:
        return ["definitions: none"]
    rows = [(encodable(f"{d.name} ({d.kind})"), encodable(f"{d.path}:{_lines_label(d.lines)}" if d.lines else d.path),
             f"{d.score:.3f}",
             "yes" if d.shown else "", "; ".join(d.reasons) or "-") for d in defs]
    head = ("definition", "lines shown", "score", "prompt", "why")
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head[:-1])]
    out = ["definitions (final round, best first):",
           "  ".join(h.ljust(w) for h, w in zip(head, widths)) + "  " + head[-1]]
    out += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1] for row in rows]
    return out


def _to_json(result: Any) -> dict[str, Any]:
    return dataclasses.asdict(result)
