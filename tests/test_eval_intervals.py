"""Bootstrap intervals of the reported figures and paired differences between runs (repocomp.eval.intervals)."""

from __future__ import annotations

import json
import random

from repocomp.cli import main
from repocomp.eval.intervals import metric_interval, paired_difference
from repocomp.eval.report import compare_markdown, intervals_markdown


def _run(ems: dict[str, list[float]], mode: str = "repocoder", fragrel: bool = False) -> list[dict]:
    return [{"task_id": f"{repo}/{i}", "repo": repo, "kind": "line", "mode": mode, "fragrel": fragrel,
             "backend": "vllm", "em": em, "es": em} for repo, values in ems.items() for i, em in enumerate(values)]


def test_interval_is_around_the_mean_over_repositories_and_shrinks_with_more_tasks() -> None:
    rng = random.Random(0)
    small = _run({"a": [float(rng.random() < 0.3) for _ in range(40)], "b": [float(rng.random() < 0.6) for _ in range(40)]})
    big = _run({"a": [float(rng.random() < 0.3) for _ in range(400)], "b": [float(rng.random() < 0.6) for _ in range(400)]})
    for run in (small, big):
        iv = metric_interval(run, "em")
        means = [sum(r["em"] for r in run if r["repo"] == repo) / sum(r["repo"] == repo for r in run) for repo in "ab"]
        assert iv is not None and iv.value == sum(means) / 2 and iv.low < iv.value < iv.high
    width = lambda run: metric_interval(run, "em").high - metric_interval(run, "em").low  # noqa: E731
    assert width(big) < 0.5 * width(small)  # about 1/sqrt(10)
    assert metric_interval(_run({"a": [None, None]}), "em") is None  # type: ignore[list-item]


def test_paired_difference_uses_common_tasks_and_tells_a_real_gain_from_noise() -> None:
    base = [0.0, 1.0] * 100
    better = list(base)
    for i in range(0, 200, 8):  # 25 of 200 tasks go from wrong to right, none the other way
        better[i] = 1.0
    run_b, run_base = _run({"a": better}, fragrel=True), _run({"a": base})
    gain = paired_difference(run_b, run_base, "em")
    assert gain is not None and gain.tasks == 200 and abs(gain.value - 25 / 200) < 1e-12 and gain.low > 0
    # one task either way on 200: inside the noise
    noise = list(base)
    noise[0], noise[1] = 1.0, 0.0
    tie = paired_difference(_run({"a": noise}), run_base, "em")
    assert tie is not None and tie.value == 0.0 and not tie.excludes_zero
    # only tasks both runs have count
    assert paired_difference(run_b[:50], run_base, "em").tasks == 50


def test_report_marks_the_baseline_and_says_no_difference_inside_the_noise() -> None:
    base = _run({"a": [0.0, 1.0] * 50})
    same = _run({"a": [1.0, 0.0] + [0.0, 1.0] * 49}, fragrel=True)
    text = intervals_markdown({"line repocoder [vllm]": base, "line repocoder+FragRel [vllm]": same})
    assert "| line repocoder [vllm] | 100 | 50.00 |" in text and "baseline" in text
    assert "no difference (100 paired)" in text


def test_compare_pairs_two_runs_of_one_configuration(tmp_path, capsys) -> None:
    # the same label twice (one configuration on two machines): `report` would merge them, `compare` pairs them
    base = _run({"a": [0.0, 1.0] * 100})
    for r in base:
        r["prediction"] = f"p{r['em']}"
    other = [dict(r) for r in base]
    for r in other[0:200:8]:  # 25 tasks go from wrong to right
        r["em"] = r["es"] = 1.0
        r["prediction"] = "fixed"
    text = compare_markdown(base, other)
    assert "| EM | 50.00 | [" in text and "| +12.50 | [" in text and "better (200 paired)" in text
    assert "175 of 200 predictions identical; other right where baseline was wrong: 25, the reverse: 0" in text
    # through the CLI, from results files
    paths = []
    for name, run in (("a.jsonl", base), ("b.jsonl", other)):
        paths.append(tmp_path / name)
        paths[-1].write_text("".join(json.dumps(r) + "\n" for r in run))
    assert main(["eval", "compare", *map(str, paths)]) == 0
    assert capsys.readouterr().out == text
    assert main(["eval", "compare", str(paths[0]), str(tmp_path / "missing.jsonl")]) == 2
    assert "missing.jsonl not found" in capsys.readouterr().err
