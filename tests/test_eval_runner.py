"""The batch runner: no leakage (planted token, real engine), resume, summary numbers, per-hole index states."""

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from repocomp.config.schema import Config
from repocomp.errors import RepocompError
from repocomp.eval.records import gt_line_attainable, read_results, summarize
from repocomp.eval.runner import EvalOptions, editor_buffer, eval_config, run_eval, task_buffer
from repocomp.eval.tasks import Task, load_tasks, make_tasks
from repocomp.index import Index
from repocomp.index.fragments import Fragment, Location

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "eval_repo"


# ------------------------------------------------------------------ a scripted engine: exact, checkable numbers


@dataclass
class Block:
    path: str
    start_line: int
    end_line: int
    text: str
    s_ind: float = 0.5
    s_env: float = 0.25
    s_rel: float = 0.625


@dataclass
class Result:
    text: str
    context: list
    prompt: str = ""
    prompt_tokens: int = 7
    timings_ms: dict = field(default_factory=lambda: {"retrieve": 1.0})


class FakeIndex:
    def __init__(self, root: Path, fragments=()):
        self.root = root
        self.state: dict[str, str | None] = {}
        self.calls: list[tuple[str, str | None]] = []
        self.fragments = list(fragments)

    def update_file(self, path, text=None):
        self.calls.append((path, text))
        self.state[path] = text


class FakeCompleter:
    """Answers by (path, hole line) from a script; records what it was asked and the index state then."""

    def __init__(self, index: FakeIndex, script: dict):
        self.index, self.script, self.asked = index, script, []

    async def acomplete(self, path, text, line, col, options):
        self.asked.append((path, line, text, dict(self.index.state), options))
        prediction, blocks = self.script.get((path, line), ("", []))
        return Result(text=prediction, context=blocks)


def _repos(tmp_path: Path) -> Path:
    for repo in ("r1", "r2"):
        (tmp_path / "repos" / repo).mkdir(parents=True)
        (tmp_path / "repos" / repo / "a.py").write_text("".join(f"line{i} = {i}\n" for i in range(30)))
    return tmp_path / "repos"


def _task(tid, repo, line, gt, defs=()):
    return Task(task_id=tid, repo=repo, path="a.py", prompt="\n".join(f"line{i} = {i}" for i in range(line)),
                ground_truth=gt, line_no=line, kind="api" if defs else "line", api_definitions=list(defs))


SCRIPT = {
    ("r1", 5): ("line5 = 5", [Block("b.py", 0, 3, "x\n  line5 = 5\n")]),     # EM 1, ES 1, gt hit
    ("r1", 9): ("", [Block("b.py", 0, 3, "nothing")]),                       # EM 0, ES 0, miss
    ("r2", 7): ("abxd", [Block("b.py", 0, 10, "abcd")]),                     # EM 0, ES .75, hit, def hit
}
TASKS = [_task("t1", "r1", 5, "line5 = 5"), _task("t2", "r1", 9, "line9 = 9"),
         _task("t3", "r2", 7, "abcd", defs=[{"path": "b.py", "line_no": 3}])]


def _factory(engines):
    def factory(root, config, options):
        index = FakeIndex(root, [Fragment(i, b.text, [Location(b.path, b.start_line, b.end_line)])
                                 for i, ((repo, _), (_, blocks)) in enumerate(SCRIPT.items()) if repo == root.name
                                 for b in blocks])
        script = {(p, ln): v for (repo, ln), v in SCRIPT.items() if repo == root.name for p in ["a.py"]}
        completer = FakeCompleter(index, script)
        engines[root.name] = (index, completer)
        return index, completer
    return factory


def test_summary_numbers_per_repository_then_over_repositories(tmp_path):
    engines = {}
    summary = run_eval(TASKS, _repos(tmp_path), EvalOptions(mode="vanilla", backend="extractive"), Config(),
                       out=tmp_path / "out.jsonl", summary_json=tmp_path / "s.json", progress=False,
                       engine_factory=_factory(engines))
    # the index holds every line a script's block shows: t1's line and t3's are there, t2's is not
    assert summary["per_repo"]["r1"] == {"tasks": 2, "failed": 0, "em": 0.5, "es": 0.5, "gt_line_recall": 0.5,
                                          "def_hit": None, "gt_line_attainable": 0.5}
    assert summary["per_repo"]["r2"] == {"tasks": 1, "failed": 0, "em": 0.0, "es": 0.75, "gt_line_recall": 1.0,
                                          "def_hit": 1.0, "gt_line_attainable": 1.0}
    assert summary["tasks"] == 3
    assert summary["em"] == pytest.approx(0.25) and summary["es"] == pytest.approx(0.625)
    assert summary["gt_line_recall"] == pytest.approx(0.75) and summary["def_hit"] == 1.0
    assert json.loads((tmp_path / "s.json").read_text()) == summary
    recs = {r["task_id"]: r for r in read_results(tmp_path / "out.jsonl")}
    assert recs["t3"]["context"] == [{"path": "b.py", "start_line": 0, "end_line": 10, "kind": "similar", "s_ind": 0.5,
                                      "s_env": 0.25, "s_rel": 0.625}]
    assert recs["t3"]["mode"] == "vanilla" and recs["t3"]["fragrel"] is False and recs["t3"]["prompt_tokens"] == 7
    assert recs["t1"]["prediction"] == "line5 = 5" and recs["t1"]["em"] == 1.0
    assert {"retrieve", "no_leak_update", "task_total"} <= set(recs["t1"]["timings_ms"])


def test_backend_none_reports_null_em_es(tmp_path):
    summary = run_eval(TASKS, _repos(tmp_path), EvalOptions(backend="none"), Config(), progress=False,
                       engine_factory=_factory({}))
    assert summary["em"] is None and summary["es"] is None
    assert summary["per_repo"]["r1"]["em"] is None
    assert summary["gt_line_recall"] == pytest.approx(0.75)


def test_each_task_sees_its_file_only_up_to_the_hole_and_the_file_is_restored(tmp_path):
    engines = {}
    run_eval(TASKS, _repos(tmp_path), EvalOptions(), Config(), progress=False, engine_factory=_factory(engines))
    index, completer = engines["r1"]
    asked = {line: (text, state) for _, line, text, state, _ in completer.asked}
    for line in (5, 9):
        text, state = asked[line]
        assert text == "".join(f"line{i} = {i}\n" for i in range(line))  # the buffer ends at the hole
        assert state["a.py"] == text  # ... and so does the indexed file at that moment
    assert index.calls[-1] == ("a.py", None)  # restored from disk after the file's last task
    options = completer.asked[0][4]
    assert options.mode == "repocoder" and options.kind == "line"


def test_resume_skips_done_tasks_and_survives_a_torn_line(tmp_path):
    repos, out = _repos(tmp_path), tmp_path / "out.jsonl"
    engines = {}
    run_eval(TASKS[:2], repos, EvalOptions(), Config(), out=out, progress=False, engine_factory=_factory(engines))
    assert len(read_results(out)) == 2
    with out.open("a") as fh:
        fh.write('{"task_id": "t9", "rep')  # an interrupted write
    engines.clear()
    summary = run_eval(TASKS, repos, EvalOptions(), Config(), out=out, progress=False,
                       engine_factory=_factory(engines))
    assert list(engines) == ["r2"]  # r1 had nothing left to do
    assert [a[1] for a in engines["r2"][1].asked] == [7]
    assert [r["task_id"] for r in read_results(out)] == ["t1", "t2", "t3"]
    assert summary["tasks"] == 3
    with pytest.raises(RepocompError, match="another run"):
        run_eval(TASKS, repos, EvalOptions(mode="oracle"), Config(), out=out, progress=False,
                 engine_factory=_factory({}))


def test_task_buffer_uses_the_prompt_below_the_lines_above_it():
    t = Task("x", "r", "a.py", prompt="c\nd", ground_truth="e", line_no=4, context_start_lineno=2)
    assert task_buffer(t, ["a", "b", "c", "d", "e"]) == ("a\nb\nc\nd\n", 4)
    assert task_buffer(t, None) == ("\n\nc\nd\n", 4)


@pytest.mark.parametrize("truth, line_no", [("e", 4), ("e(\n  f)", 4), ("a", 0), ("g", 6)])
def test_the_editor_variant_is_the_file_with_the_hole_emptied(truth, line_no):
    """`--editor`: the file as it stood with the hole's lines (one or several) replaced by one empty line."""
    lines = ["a", "b", "c", "d", *truth.split("\n"), "h", "i"] if line_no == 4 else \
        [truth, "b", "c"] if line_no == 0 else ["a", "b", "c", "d", "e", "f", truth]
    t = Task("x", "r", "a.py", prompt="\n".join(lines[:line_no]), ground_truth=truth, line_no=line_no)
    text, line = editor_buffer(t, lines)
    n = truth.count("\n") + 1
    assert text.split("\n") == lines[:line_no] + [""] + lines[line_no + n:] and line == line_no
    assert text.split("\n")[line] == ""


def test_a_line_is_attainable_only_where_the_leak_rule_lets_retrieval_see_it(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    shared = "total = price_cents * quantity"
    (repo / "a.py").write_text("".join(f"a{i} = {i}\n" for i in range(60)) + f"{shared}\nonly_in_a = 1\n")
    (repo / "b.py").write_text("".join(f"b{i} = {i}\n" for i in range(10)) + f"    {shared}\n")
    index = Index.build(repo, Config())

    def attainable(line, path, prompt_start_line):
        return gt_line_attainable(line, index, path, prompt_start_line)

    assert attainable(shared, "a.py", 0)  # in b.py (indented there: lines compare stripped)
    assert not attainable("only_in_a = 1", "a.py", 0)  # its own file's windows all reach the prompt
    assert attainable("only_in_a = 1", "b.py", 0)  # from another file's hole it is there to find
    assert attainable("a3 = 3", "a.py", 50)  # above the in-file context of a hole further down
    assert not attainable("a55 = 55", "a.py", 50)  # a window reaching into the context is left out
    assert not attainable("nowhere = 0", "a.py", 0) and not attainable("\n  \n", "a.py", 0)


def test_summarize_of_nothing():
    assert summarize([]) == {"tasks": 0, "failed": 0, "em": None, "es": None, "gt_line_recall": None,
                             "def_hit": None, "gt_line_attainable": None, "per_repo": {}}


# --------------------------------------------------------------------------------- the real engine: no leakage

PLANT = "zqxplanted"


@pytest.fixture
def planted_repo(tmp_path):
    """The fixture repo with a unique token in a ground-truth line and in a later line of the same file."""
    repo = tmp_path / "repos" / "eval_repo"
    shutil.copytree(FIXTURE, repo)
    cart = repo / "shop" / "cart.py"
    lines = cart.read_text().splitlines()
    hole = lines.index("        discounted = compute_discount(subtotal, discount_rate)")
    lines[hole] = f"        discounted = compute_discount(subtotal, discount_rate) + {PLANT}_gt"
    lines.append(f"    {PLANT}_after = 1")
    cart.write_text("\n".join(lines) + "\n")
    prompt = "\n".join(lines[:hole])
    task = Task("planted", "eval_repo", "shop/cart.py", prompt=prompt, ground_truth=lines[hole], line_no=hole,
                kind="api", api_definitions=[{"path": "shop/pricing.py", "line_no": 5}])
    return tmp_path / "repos", task


@pytest.mark.parametrize("mode,backend", [("repocoder", "extractive"), ("vanilla", "none"), ("oracle", "none")])
def test_planted_ground_truth_token_never_reaches_the_prompt(planted_repo, tmp_path, mode, backend):
    from repocomp.eval.runner import open_engine

    repos, task = planted_repo
    seen = {}

    def factory(root, config, options):
        index, completer = open_engine(root, config, options)
        assert any(PLANT in (f.text if f else "") for f in index.fragments)  # on disk, the token is indexed
        real = completer.acomplete

        async def spy(*args, **kw):
            seen["fragments"] = [f.text for f in index.fragments if f is not None]
            result = await real(*args, **kw)
            seen["result"] = result
            seen["fragments_after"] = [f.text for f in index.fragments if f is not None]
            return result

        completer.acomplete = spy
        seen["index"] = index
        return index, completer

    others = [t for t in make_tasks(repos / "eval_repo", "api", n=5, seed=1) if t.path != "shop/cart.py"]
    summary = run_eval([task, *others], repos, EvalOptions(mode=mode, backend=backend), Config(),
                       out=tmp_path / "out.jsonl", progress=False, engine_factory=factory)
    rec = {r["task_id"]: r for r in read_results(tmp_path / "out.jsonl")}["planted"]
    assert summary["tasks"] == 1 + len(others)
    # the planted task's prompt and context: rerun it alone so `seen` holds its result
    seen.clear()
    (tmp_path / "out.jsonl").unlink()
    run_eval([task], repos, EvalOptions(mode=mode, backend=backend), Config(), out=tmp_path / "out.jsonl",
             progress=False, engine_factory=factory)
    result = seen["result"]
    assert PLANT not in result.prompt
    assert all(PLANT not in b.text for b in result.context)
    assert all(PLANT not in r.draft for r in result.rounds)
    assert not any(PLANT in t for t in seen["fragments"] + seen["fragments_after"])  # nor anywhere in the index
    assert result.context and rec["context"]  # retrieval did happen
    if mode == "repocoder":  # the window holding compute_discount's definition is in the final prompt
        assert rec["def_hit"] is True
    assert any(PLANT in (f.text if f else "") for f in seen["index"].fragments)  # restored from disk afterwards


def test_cli_make_tasks_eval_resume_and_report(tmp_path, capsys):
    from repocomp.cli import main

    repos = tmp_path / "repos"
    shutil.copytree(FIXTURE, repos / "eval_repo")
    tasks, out = tmp_path / "api.jsonl", tmp_path / "r.jsonl"
    assert main(["eval", "make-tasks", str(repos / "eval_repo"), "--kind", "api", "--n", "4", "--out", str(tasks)]) == 0
    argv = ["eval", str(tasks), "--repos", str(repos), "--mode", "vanilla", "--backend", "extractive",
            "--out", str(out), "--summary-json", str(tmp_path / "s.json"), "--no-progress"]
    assert main(argv + ["--limit", "2"]) == 0
    assert main(argv) == 0
    records = read_results(out)
    assert sorted(r["task_id"] for r in records) == sorted(t.task_id for t in load_tasks(tasks))
    assert all(r["em"] in (0.0, 1.0) and 0.0 <= r["es"] <= 1.0 for r in records)
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["tasks"] == 4 and summary["def_hit"] is not None
    capsys.readouterr()
    assert main(["eval", "report", str(out), "--png", str(tmp_path / "c.png")]) == 0
    assert "| api vanilla+defs [extractive] | " in capsys.readouterr().out  # the defaults: no relations
    assert main(["eval", str(tmp_path / "missing.jsonl"), "--repos", str(repos)]) == 2


def test_fragrel_switch_turns_every_relation_off_and_records_what_ran(tmp_path):
    cfg = eval_config(Config(), EvalOptions(plain=True, alpha=0.5, query_relations=0.5))
    assert cfg.retrieval.alpha == 0.0 and cfg.retrieval.query_relations == 0.0  # plain RepoCoder
    assert not cfg.definitions.enabled
    on = eval_config(Config(), EvalOptions(alpha=0.5, query_relations=0.25))
    assert on.retrieval.alpha == 0.5 and on.retrieval.query_relations == 0.25 and on.definitions.enabled
    repos = _repos(tmp_path)
    run_eval(TASKS[:1], repos, EvalOptions(plain=True), Config(), out=tmp_path / "off.jsonl",
             progress=False, engine_factory=_factory({}))
    run_eval(TASKS[:1], repos, EvalOptions(alpha=0.5, query_relations=0.5), Config(), out=tmp_path / "on.jsonl",
             progress=False, engine_factory=_factory({}))
    off = read_results(tmp_path / "off.jsonl")[0]
    assert off["query_relations"] == 0.0 and off["fragrel"] is False and off["definitions"] is False
    assert read_results(tmp_path / "on.jsonl")[0]["fragrel"] is True
    assert read_results(tmp_path / "on.jsonl")[0]["query_relations"] == 0.5


def test_the_evaluation_waits_for_a_slow_backend_unless_told_otherwise(tmp_path):
    """The editor's 30 s deadline would let a busy machine empty answers in a batch run; `repocomp eval` waits up
    to `--timeout` (600 s by default) for each completion."""
    from lsp_bench.slow_backend import SlowBackend
    from repocomp.cli import main

    repos = tmp_path / "repos"
    shutil.copytree(FIXTURE, repos / "eval_repo")
    tasks = tmp_path / "line.jsonl"
    assert main(["eval", "make-tasks", str(repos / "eval_repo"), "--kind", "line", "--n", "1", "--out", str(tasks)]) == 0
    source = "\n".join(p.read_text() for p in sorted((repos / "eval_repo").rglob("*.py")))
    slow = SlowBackend(source, latency_s=1.5)
    config = tmp_path / "slow.toml"
    config.write_text(f'[backend]\nname = "vllm"\nmodel = "slow"\n[backend.vllm]\nendpoints = ["{slow.start()}"]\n'
                      "[retrieval]\niterations = 1\n")
    try:
        for extra, out in (([], "waited.jsonl"), (["--timeout", "0.3"], "cut.jsonl")):
            main(["eval", str(tasks), "--repos", str(repos), "--backend", "vllm", "--config", str(config),
                  "--out", str(tmp_path / out), "--no-progress", *extra])
    finally:
        slow.stop()
    (waited,), (cut,) = read_results(tmp_path / "waited.jsonl"), read_results(tmp_path / "cut.jsonl")
    assert waited["em"] == 1.0 and waited["prediction"].strip()
    assert cut["prediction"] is None and cut["em"] is None and "no answer" in cut["error"]  # failed, not scored 0
