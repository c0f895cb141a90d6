"""Reports over results files: markdown tables (run x repository per metric) and a bar chart (matplotlib Agg)."""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path
from typing import Any

from repocomp.errors import RepocompError
from repocomp.eval.records import read_results, summarize

METRICS = (("em", "EM"), ("es", "ES"), ("gt_line_recall", "gt_line_recall"), ("def_hit", "def_hit"),
           ("gt_line_attainable", "gt_line_attainable"))


def run_label(record: dict[str, Any]) -> str:
    """`<kind> <mode>[+FragRel][+qrW][+defs] [<backend>]`, e.g. `api repocoder+FragRel+qr0.5+defs [none]`."""
    retrieves = record.get("mode") != "infile"
    fragrel = "+FragRel" if record.get("fragrel") and retrieves else ""
    kind = record.get("kind") or "?"
    qr = record.get("query_relations")
    qr_label = f"+qr{qr:g}" if qr and retrieves else ""
    defs = "+defs" if record.get("definitions") and retrieves else ""
    return f"{kind} {record.get('mode')}{fragrel}{qr_label}{defs} [{record.get('backend', '?')}]"


def collect_records(paths: list[str | os.PathLike[str]]) -> dict[str, list[dict[str, Any]]]:
    """Records per run label over all given results files (a label's records may span several files)."""
    runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for path in paths:
        records = read_results(path)
        if not records and not Path(path).exists():
            raise RepocompError(f"results file {path} not found")
        for r in records:
            runs[run_label(r)].append(r)
    return dict(runs)


def collect(paths: list[str | os.PathLike[str]]) -> dict[str, dict[str, Any]]:
    """Summary per run label over all given results files."""
    return {label: summarize(records) for label, records in collect_records(paths).items()}


def baseline_label(label: str) -> str:
    """Plain RepoCoder (no relations) of the same kind and backend: what every difference is measured against."""
    kind, _, rest = label.partition(" ")
    return f"{kind} repocoder [{rest.rpartition('[')[2]}"


def intervals_markdown(runs: dict[str, list[dict[str, Any]]]) -> str:
    """EM and ES of each run with 95% intervals, and the paired difference from plain RepoCoder on the same tasks."""
    from repocomp.eval.intervals import metric_interval, paired_difference

    out = []
    for key, title in (("em", "EM"), ("es", "ES")):
        found = [(label, metric_interval(records, key)) for label, records in sorted(runs.items())]
        rows = [(label, iv) for label, iv in found if iv is not None]
        if not rows:
            continue
        out.append(f"**{title}** (%, mean over repositories; 95% bootstrap intervals; differences paired by task "
                   "against plain RepoCoder of the same kind)\n")
        out.append(f"| run | tasks | {title} | 95% interval | vs plain RepoCoder | 95% interval | verdict |")
        out.append("|---|---:|---:|---|---:|---|---|")
        for label, iv in rows:
            base = baseline_label(label)
            diff = paired_difference(runs[label], runs[base], key) if base in runs and base != label else None
            if diff is None:
                cells = ["", "", "baseline" if base == label else ""]
            else:
                cells = [f"{100 * diff.value:+.2f}", f"[{100 * diff.low:+.2f}, {100 * diff.high:+.2f}]",
                         f"{_verdict(diff)} ({diff.tasks} paired)"]
            out.append(f"| {label} | {iv.tasks} | {100 * iv.value:.2f} | [{100 * iv.low:.2f}, {100 * iv.high:.2f}] | "
                       + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out) + ("\n" if out else "")


def _verdict(diff: Any) -> str:
    return ("better" if diff.low > 0 else "worse") if diff.excludes_zero else "no difference"


def compare_markdown(baseline: list[dict[str, Any]], other: list[dict[str, Any]]) -> str:
    """Two runs of any labels (the same configuration on two machines, say), paired by task: EM and ES of each with
    95% intervals, `other - baseline` with its paired interval, and how many predictions agree, won or lost."""
    from repocomp.eval.intervals import metric_interval, paired_difference

    out = ["| metric | baseline | 95% interval | other | 95% interval | difference (paired) | 95% interval | verdict |",
           "|---|---:|---|---:|---|---:|---|---|"]
    for key, title in (("em", "EM"), ("es", "ES")):
        a, b = metric_interval(baseline, key), metric_interval(other, key)
        diff = paired_difference(other, baseline, key)
        if a is None or b is None or diff is None:
            continue
        out.append(f"| {title} | {100 * a.value:.2f} | [{100 * a.low:.2f}, {100 * a.high:.2f}] | {100 * b.value:.2f} | "
                   f"[{100 * b.low:.2f}, {100 * b.high:.2f}] | {100 * diff.value:+.2f} | "
                   f"[{100 * diff.low:+.2f}, {100 * diff.high:+.2f}] | {_verdict(diff)} ({diff.tasks} paired) |")
    if len(out) == 2:
        return "no tasks with EM or ES in both runs\n"
    base = {r["task_id"]: r for r in baseline}
    pairs = [(base[r["task_id"]], r) for r in other if r["task_id"] in base]
    same = sum(a.get("prediction") == b.get("prediction") for a, b in pairs)
    won = sum((b.get("em") or 0) > (a.get("em") or 0) for a, b in pairs)
    lost = sum((b.get("em") or 0) < (a.get("em") or 0) for a, b in pairs)
    return "\n".join(out) + f"\n\n{same} of {len(pairs)} predictions identical; other right where baseline was " \
        f"wrong: {won}, the reverse: {lost}\n"


def _fmt(value: float | None, pct: bool = True) -> str:
    if value is None:
        return "-"
    return f"{100 * value:.2f}" if pct else f"{value:.3f}"


def markdown(summaries: dict[str, dict[str, Any]]) -> str:
    """One table per metric that has values: rows = runs, columns = repositories and their mean (in %)."""
    repos = sorted({repo for s in summaries.values() for repo in s["per_repo"]})
    out = []
    for key, title in METRICS:
        if all(s[key] is None for s in summaries.values()):
            continue
        out.append(f"**{title}** (%, mean over repositories in the last column)\n")
        out.append("| run | " + " | ".join(repos) + " | mean |")
        out.append("|---|" + "---:|" * (len(repos) + 1))
        for label in sorted(summaries):
            s = summaries[label]
            cells = [_fmt(s["per_repo"][r][key]) if r in s["per_repo"] else "" for r in repos]
            out.append(f"| {label} | " + " | ".join(cells) + f" | {_fmt(s[key])} |")
        out.append("")
    tasks = ", ".join(f"{label}: {s['tasks']}" for label, s in sorted(summaries.items()))
    out.append(f"Tasks per run: {tasks}.")
    return "\n".join(out) + "\n"


def bar_chart(summaries: dict[str, dict[str, Any]], png: str | os.PathLike[str],
              runs: dict[str, list[dict[str, Any]]] | None = None) -> None:
    """Grouped bars: one panel per metric with values, one bar per run (mean over repositories); with the runs'
    records, EM and ES bars carry their 95% bootstrap intervals."""
    import matplotlib

    from repocomp.eval.intervals import metric_interval

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = [(k, t) for k, t in METRICS if any(s[k] is not None for s in summaries.values())]
    labels = sorted(summaries)
    fig, axes = plt.subplots(1, len(metrics), figsize=(max(4.0, 0.45 * len(labels) + 2) * len(metrics), 4.8),
                             squeeze=False)
    for ax, (key, title) in zip(axes[0], metrics):
        values = [100 * (summaries[lb][key] or 0.0) for lb in labels]
        colors = [f"C{i % 10}" for i in range(len(labels))]
        errors = None
        if runs is not None and key in ("em", "es"):
            ivs = [metric_interval(runs[lb], key) for lb in labels]
            errors = [[v - 100 * iv.low if iv else 0.0 for v, iv in zip(values, ivs)],
                      [100 * iv.high - v if iv else 0.0 for v, iv in zip(values, ivs)]]
        ax.bar(range(len(labels)), values, color=colors, yerr=errors, capsize=2)
        ax.set_xticks(range(len(labels)))
        ax.set_xticklabels(labels, rotation=60, ha="right", fontsize=7)
        ax.set_title(title)
        ax.set_ylabel("%")
        ax.set_ylim(0, 100)
        for i, v in enumerate(values):
            ax.text(i, v + 1, f"{v:.1f}", ha="center", fontsize=6)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
