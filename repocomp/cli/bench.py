"""`repocomp bench index|monorepo|retrieve|complete|prefill|memory|lsp|typing|session|line-ends|replay`: benchmarks that print their
figures."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    import importlib

    p = sub.add_parser("bench",
                       help="benchmarks: index, monorepo, retrieve, complete, prefill, memory, lsp, typing, session, line-ends, replay")
    verbs = p.add_subparsers(dest="bench", required=True)
    for name in ("repocomp.bench.index", "repocomp.bench.retrieve", "repocomp.bench.complete",
                 "repocomp.bench.prefill", "repocomp.bench.memory", "repocomp.bench.monorepo", "lsp_bench.bench", "lsp_bench.replay", "lsp_bench.commit_replay",
                 "lsp_bench.long_session", "lsp_bench.line_ends"):
        importlib.import_module(name).register(verbs)
