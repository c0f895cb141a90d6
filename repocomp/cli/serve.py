"""`repocomp serve`: the language server (lsp_server.entry holds its options and its start)."""

from __future__ import annotations

import argparse

from lsp_server import entry


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("serve", help="run the language server (inline completion) on stdio or TCP",
                                   description=entry.DESCRIPTION)
    entry.add_arguments(parser)
