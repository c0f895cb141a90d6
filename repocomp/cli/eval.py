"""`repocomp eval`: batch RepoEval evaluation, plus the `make-tasks`, `report` and `compare` sub-verbs.

    repocomp eval TASKS.jsonl --repos DIR [--mode M] [--no-fragrel] [--no-definitions] [--backend B] ...
    repocomp eval make-tasks REPO --kind line|api|function [--language NAME|all] [--n N] [--seed S] --out FILE
    repocomp eval make-tasks REPO.git --kind session [--n N] [--seed S] [--per-commit K] --out FILE
    repocomp eval report RESULTS.jsonl... [--png FILE]
    repocomp eval compare BASELINE.jsonl OTHER.jsonl

`eval` takes everything after it verbatim and picks the sub-verb from its first word, so the plain form
(`repocomp eval TASKS.jsonl ...`) and the sub-verbs share one command.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from graph.languages import available
from repocomp.config.schema import EVAL_BACKENDS, MODES
from repocomp.errors import RepocompError
from repocomp.text import encodable


def register(subparsers: argparse._SubParsersAction) -> None:
    # prefix_chars that no argument uses: every word after `eval` (options too) lands in `eval_argv`
    parser = subparsers.add_parser(
        "eval", add_help=False, prefix_chars="\x00",
        help="batch RepoEval evaluation (sub-verbs: make-tasks, report, compare); `repocomp eval -h` for details")
    parser.add_argument("eval_argv", nargs="*")
    parser.set_defaults(run=run)


def run_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="repocomp eval", description="Evaluate completion on RepoEval-format tasks, without leakage.",
        epilog="Other verbs: `repocomp eval make-tasks -h`, `repocomp eval report -h`, `repocomp eval compare -h`.")
    p.add_argument("tasks", type=Path, help="RepoEval JSONL tasks file")
    p.add_argument("--repos", type=Path, required=True, help="folder holding the repositories (fpath_tuple[0])")
    p.add_argument("--mode", default="repocoder", choices=MODES)
    p.add_argument("--no-fragrel", action="store_true",
                   help="plain RepoCoder: no relations (FragRel, query side) and no definitions")
    p.add_argument("--alpha", type=float, metavar="A", help="FragRel's weight (Eq. 10; the paper's is 0.5)")
    p.add_argument("--query-relations", type=float, metavar="W", help="weight of query-side relations")
    p.add_argument("--no-definitions", action="store_true",
                   help="no definitions section (ablation; plain RepoCoder, --no-fragrel, has none either)")
    p.add_argument("--backend", default="none", choices=EVAL_BACKENDS,
                   help="none = retrieval only (prediction empty, EM/ES null)")
    p.add_argument("--kind", choices=("line", "api", "function", "session"),
                   help="task kind when the file does not say (default: guessed)")
    p.add_argument("--paging", action="store_true",
                   help="MemGPT's model-directed paging: the repository names a draft uses that its prompt does not "
                        "define are paged in for one more round ([retrieval] paging)")
    p.add_argument("--editor", action="store_true",
                   help="the buffer as an editor sends it: the code after the hole too (line and API tasks: the file "
                        "with the hole emptied; session tasks: the buffer at that moment)")
    p.add_argument("--mid-line", nargs="?", const="word", choices=("word", "bracket"),
                   help="session tasks: the cursor inside the hole's line, the answer scored with the line's rest: "
                        "word (the default) types its first word; bracket types up to its first opening bracket "
                        "and puts the closer after the cursor, as an editor's auto-pairing does (with --editor); "
                        "holes without such a place are left out")
    p.add_argument("--no-memory", action="store_true",
                   help="session tasks: no session memory (buffers synced, nothing remembered of the edits)")
    # ablations of the session memory's parts (session tasks)
    p.add_argument("--no-controller", action="store_true",
                   help="memory ablation: consult the session at every request (no relevance threshold: the "
                        "default since the threshold was not shown to help; for a --config file that sets "
                        "[memory] min_score)")
    p.add_argument("--no-replaced", action="store_true",
                   help="memory ablation: the code replaced at the cursor is not shown first (only as any hunk)")
    p.add_argument("--no-thoughts", action="store_true", help="memory ablation: raw hunks only, no thoughts")
    p.add_argument("--no-memory-relations", action="store_true",
                   help="memory ablation: rank entries without the code graph's relations (FragRel over the session)")
    p.add_argument("--out", type=Path, help="results JSONL (appended; a rerun skips tasks already there)")
    p.add_argument("--summary-json", type=Path, metavar="FILE", help="write the summary here")
    p.add_argument("--workers", type=int, default=1, help="files evaluated concurrently (for vLLM)")
    p.add_argument("--limit", type=int, metavar="N", help="only the first N tasks")
    p.add_argument("--generation-cache", metavar="FILE", default="",
                   help="keep the model's greedy answers in FILE (SQLite) and answer from it where the same model "
                        "gets the same request again: runs that share the file (an ablation and its baseline) decode "
                        "only where their prompts differ; records count the cached generations")
    p.add_argument("--timeout", type=float, metavar="S",
                   help="each completion's deadline in seconds (default: the --config file's [backend] timeout_s "
                        "when it sets one, else 600: an evaluation measures answers, and the editor's 30 s would "
                        "let a busy machine empty some)")
    p.add_argument("--config", type=Path, metavar="FILE", help="repocomp TOML config (default: built-in)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def make_tasks_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="repocomp eval make-tasks",
        description="Make RepoEval-style tasks from a repository (line and API tasks from any language the index "
                    "parses, function tasks from Python files), or (--kind session) editing-session tasks from its "
                    "git history (REPO: a bare NAME.git, a clone, or NAME.git.tar.gz).")
    p.add_argument("repo", type=Path)
    p.add_argument("--kind", required=True, choices=("line", "api", "function", "session"))
    p.add_argument("--n", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--language", metavar="NAME", choices=(*available(), "all"),
                   help="line/api/function: make tasks from this language's files only (" + ", ".join(available())
                        + "), or `all` for every language found; default: the repository's dominant language "
                        "(the one with most files the index holds; ties: alphabetical). Each task records its "
                        "`language`")
    p.add_argument("--prompt-tokens", type=int, default=2000, help="in-file prompt budget (estimated tokens)")
    p.add_argument("--per-commit", type=int, default=5, metavar="K", help="session: at most K holes per commit")
    p.add_argument("--min-chars", type=int, default=8, metavar="C",
                   help="session: a hole line has at least C characters (stripped)")
    p.add_argument("--out", type=Path, required=True)
    return p


def report_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="repocomp eval report", description="Markdown tables and a chart of results.")
    p.add_argument("results", type=Path, nargs="+")
    p.add_argument("--png", type=Path, help="write a bar chart here")
    return p


def compare_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="repocomp eval compare",
        description="Two results files paired by task, whatever their configurations: `report` pairs each run with "
                    "plain RepoCoder of its kind; this pairs any two (one configuration on two machines, say).")
    p.add_argument("baseline", type=Path)
    p.add_argument("other", type=Path)
    return p


def run(args: argparse.Namespace) -> int:
    argv = list(args.eval_argv)
    if argv and argv[0] == "make-tasks":
        return _make_tasks(make_tasks_parser().parse_args(argv[1:]))
    if argv and argv[0] == "report":
        return _report(report_parser().parse_args(argv[1:]))
    if argv and argv[0] == "compare":
        return _compare(compare_parser().parse_args(argv[1:]))
    return _evaluate(run_parser().parse_args(argv))


_EVAL_TIMEOUT_S = 600.0  # a completion's deadline in an evaluation, unless the --config file or --timeout says


def _evaluate(a: argparse.Namespace) -> int:
    from repocomp.config.loading import load_config
    from repocomp.config.schema import BackendConfig, Config
    from repocomp.eval.runner import EvalOptions, run_eval
    from repocomp.eval.tasks import load_tasks

    if a.limit is not None and a.limit < 1:
        raise RepocompError(f"--limit must be >= 1, got {a.limit}")
    if a.timeout is not None and not 0 < a.timeout <= 86_400:
        raise RepocompError(f"--timeout must be in (0, 86400] seconds, got {a.timeout:g}")
    tasks = load_tasks(a.tasks, kind=a.kind)
    if a.limit is not None:
        tasks = tasks[: a.limit]
    config = load_config(config_file=a.config) if a.config else Config()
    ablated = {k: v for k, v in (("min_score", 0.0 if a.no_controller else None),
                                 ("replaced", False if a.no_replaced else None),
                                 ("thoughts", False if a.no_thoughts else None),
                                 ("relations", False if a.no_memory_relations else None)) if v is not None}
    if ablated:
        config = config.replace("memory", **ablated)
    if a.paging:
        config = config.replace("retrieval", paging=True)
    if a.timeout is not None or config.backend.timeout_s == BackendConfig().timeout_s:
        config = config.replace("backend", timeout_s=a.timeout or _EVAL_TIMEOUT_S)
    options = EvalOptions(mode=a.mode, plain=a.no_fragrel, alpha=a.alpha, query_relations=a.query_relations,
                          backend=a.backend, workers=a.workers, definitions=False if a.no_definitions else None,
                          memory=not a.no_memory, editor=a.editor, mid_line=a.mid_line or "",
                          generation_cache=a.generation_cache)
    summary = run_eval(tasks, a.repos, options, config, out=a.out, summary_json=a.summary_json,
                       progress=not a.no_progress and sys.stderr.isatty())
    print(json.dumps({k: v for k, v in summary.items() if k != "per_repo"}))
    if summary["failed"]:
        where = f"the `error` field in {a.out}; rerun the same command to retry them" if a.out else "the log above"
        print(f"repocomp: {summary['failed']} task(s) failed (see {where})", file=sys.stderr)
        return 1
    return 0


def _make_tasks(a: argparse.Namespace) -> int:
    from repocomp.eval.tasks import make_tasks, pick_languages, repository_languages, write_tasks

    if a.n <= 0:
        raise RepocompError("--n must be > 0")
    if a.kind == "session":
        from repocomp.eval.session_tasks import make_session_tasks

        if a.per_commit <= 0 or a.min_chars < 0:
            raise RepocompError("--per-commit must be > 0 and --min-chars >= 0")
        stats: dict = {}
        tasks = make_session_tasks(a.repo, a.n, a.seed, per_commit=a.per_commit, min_chars=a.min_chars,
                                   prompt_tokens=a.prompt_tokens, stats=stats)
        n = write_tasks(tasks, a.out)
        print(encodable(f"{n} session tasks from {stats['used']} commits of {stats['repo']} ({stats['looked']} "
                        f"looked at, {stats['qualified']} qualified, {stats['commits']} with a parent) written to "
                        f"{a.out}"))
        return 0
    tasks = make_tasks(a.repo, a.kind, a.n, a.seed, prompt_tokens=a.prompt_tokens, language=a.language)
    if not tasks:
        languages = pick_languages(a.repo, a.language) if a.repo.is_dir() else ()
        found = repository_languages(a.repo) if a.repo.is_dir() else {}
        if not any(found.get(lang) for lang in languages):
            why = (f"it has no {'/'.join(languages)} file the index reads" if a.language or found
                   else "it has no file of a language the index parses")
        elif a.kind == "function" and "python" not in languages:
            why = "function tasks are made from Python files only"
        else:
            why = f"none of its {'/'.join(languages)} code qualifies as a {a.kind} hole"
        raise RepocompError(encodable(f"no {a.kind} tasks from {a.repo}: {why}; nothing written"))
    n = write_tasks(tasks, a.out)
    per_language = Counter(t.language for t in tasks)
    print(encodable(f"{n} {a.kind} tasks ({', '.join(f'{k}: {v}' for k, v in sorted(per_language.items()))}) "
                    f"written to {a.out}"))
    return 0


def _report(a: argparse.Namespace) -> int:
    from repocomp.eval.records import summarize
    from repocomp.eval.report import bar_chart, collect_records, intervals_markdown, markdown

    runs = collect_records(a.results)
    summaries = {label: summarize(records) for label, records in runs.items()}
    if not summaries:
        raise RepocompError("no results in the given files")
    print(encodable(markdown(summaries)), end="")  # labels and repository names are data
    print(encodable(intervals_markdown(runs)), end="")
    if a.png:
        bar_chart(summaries, a.png, runs)
        print(f"chart written to {a.png}", file=sys.stderr)
    return 0


def _compare(a: argparse.Namespace) -> int:
    from repocomp.eval.records import read_results
    from repocomp.eval.report import compare_markdown

    runs = []
    for path in (a.baseline, a.other):
        if not path.exists():
            raise RepocompError(f"results file {path} not found")
        runs.append(read_results(path))
    print(encodable(compare_markdown(*runs)), end="")
    return 0
