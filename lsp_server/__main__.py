"""`python -m lsp_server [--tcp HOST:PORT] [--log-file F]`: the same as `repocomp serve`."""

import argparse
import sys

from repocomp.cli import serve
from repocomp.errors import RepocompError

parser = argparse.ArgumentParser(prog="python -m lsp_server")
serve.register(parser.add_subparsers(dest="command"))
args = parser.parse_args(["serve", *sys.argv[1:]])
try:
    sys.exit(args.run(args))
except RepocompError as exc:
    print(f"repocomp: error: {exc}", file=sys.stderr)
    sys.exit(2)
