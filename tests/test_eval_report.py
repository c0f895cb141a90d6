"""Report rendering: markdown tables per metric (run x repository) and the PNG chart."""

import gzip
import json
from pathlib import Path

from repocomp.eval.report import bar_chart, collect, markdown, run_label


def _rec(tid, repo, mode, fragrel, hit, em=None, es=None, def_hit=None, backend="none", kind="api"):
    return {"task_id": tid, "repo": repo, "mode": mode, "fragrel": fragrel, "backend": backend, "kind": kind,
            "em": em, "es": es, "gt_line_hit": hit, "def_hit": def_hit, "context": [], "prediction": ""}


def _write(path: Path, recs) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def test_run_label():
    assert run_label(_rec("a", "r", "repocoder", True, True)) == "api repocoder+FragRel [none]"
    assert run_label(_rec("a", "r", "vanilla", False, True, backend="extractive")) == "api vanilla [extractive]"
    assert run_label(_rec("a", "r", "infile", True, True, kind="line")) == "line infile [none]"
    assert run_label(dict(_rec("a", "r", "repocoder", True, True), query_relations=0.5)) == \
        "api repocoder+FragRel+qr0.5 [none]"
    assert run_label(dict(_rec("a", "r", "repocoder", True, True), query_relations=0.25, definitions=True)) == \
        "api repocoder+FragRel+qr0.25+defs [none]"


def test_markdown_tables_and_chart(tmp_path):
    a = _write(tmp_path / "a.jsonl", [_rec("1", "r1", "vanilla", True, True, def_hit=True),
                                      _rec("2", "r1", "vanilla", True, False, def_hit=False),
                                      _rec("3", "r2", "vanilla", True, True, def_hit=True)])
    b = _write(tmp_path / "b.jsonl", [_rec("1", "r1", "vanilla", False, False, def_hit=False),
                                      _rec("3", "r2", "vanilla", False, True, def_hit=False)])
    summaries = collect([a, b])
    md = markdown(summaries)
    lines = md.splitlines()
    assert "**gt_line_recall** (%, mean over repositories in the last column)" in lines
    assert "**EM**" not in md and "**ES**" not in md  # backend none: no EM/ES tables
    i = lines.index("**gt_line_recall** (%, mean over repositories in the last column)")
    assert lines[i + 2] == "| run | r1 | r2 | mean |"
    assert lines[i + 4] == "| api vanilla [none] | 0.00 | 100.00 | 50.00 |"
    assert lines[i + 5] == "| api vanilla+FragRel [none] | 50.00 | 100.00 | 75.00 |"
    j = lines.index("**def_hit** (%, mean over repositories in the last column)")
    assert lines[j + 5] == "| api vanilla+FragRel [none] | 50.00 | 100.00 | 75.00 |"
    assert "api vanilla [none]: 2" in md
    png = tmp_path / "chart.png"
    bar_chart(summaries, png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


def test_em_es_tables_when_scored(tmp_path):
    a = _write(tmp_path / "a.jsonl", [_rec("1", "r1", "repocoder", True, True, em=1.0, es=1.0, backend="extractive"),
                                      _rec("2", "r1", "repocoder", True, True, em=0.0, es=0.5, backend="extractive")])
    md = markdown(collect([a]))
    assert "| api repocoder+FragRel [extractive] | 50.00 | 50.00 |" in md  # EM table row: r1 and mean
    assert "| api repocoder+FragRel [extractive] | 75.00 | 75.00 |" in md  # ES
    assert "**def_hit**" not in md


def test_published_gzipped_results_are_read(tmp_path):
    recs = [_rec("1", "r1", "vanilla", True, True), _rec("2", "r2", "vanilla", True, False)]
    plain = _write(tmp_path / "a.jsonl", recs)
    packed = tmp_path / "b.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert collect([packed]) == collect([plain])
    assert collect([packed])["api vanilla+FragRel [none]"]["tasks"] == 2
