"""`repocomp` command line: each subcommand lives in its own module and registers itself here."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from repocomp.errors import RepocompError
from repocomp.text import encodable

# each module registers one subcommand via `register(subparsers)`
_SUBCOMMANDS = ("index", "complete", "eval", "serve", "bench", "model", "memory")


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    """The parser for `argv`: with only its subcommand's module imported when it names one (the benchmarks' and the
    server's imports took a second before a `complete`), with all of them otherwise (`--help`, a wrong name)."""
    parser = argparse.ArgumentParser(prog="repocomp", description="Repository-level code completion.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages to stderr")
    sub = parser.add_subparsers(dest="command", required=True)
    named = next((arg for arg in argv if not arg.startswith("-")), None)
    for name in (named,) if named in _SUBCOMMANDS else _SUBCOMMANDS:
        module = importlib.import_module(f"repocomp.cli.{name}")
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    _escape_unencodable_output()
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(argv).parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.run(args) or 0)
    except RepocompError as exc:
        print(f"repocomp: error: {encodable(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("repocomp: interrupted", file=sys.stderr)
        return 130


def _escape_unencodable_output() -> None:
    """Whatever text reaches stdout unescaped (a name with an undecodable byte, a lone surrogate) is written as a
    backslash escape: the default handler raises on a UTF-8 locale (a traceback) or, on C.UTF-8, writes the raw
    byte, which is not UTF-8 either. Printing passes names through `encodable` first; this is the net."""
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if callable(reconfigure):
        reconfigure(errors="backslashreplace")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
