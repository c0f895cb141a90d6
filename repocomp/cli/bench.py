"""`repocomp bench index|retrieve|complete|lsp PATH`: benchmarks that print their figures (medians over runs)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    import importlib

    p = sub.add_parser("bench", help="benchmarks: index, retrieve, complete, lsp, typing")
    verbs = p.add_subparsers(dest="bench", required=True)
    for name in ("repocomp.bench.index", "repocomp.bench.retrieve", "repocomp.bench.complete", "lsp_server.bench",
                 "lsp_server.replay"):
        importlib.import_module(name).register(verbs)
