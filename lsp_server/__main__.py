"""`python -m lsp_server [--tcp HOST:PORT] [--log-file F]`: the same as `repocomp serve`."""

import argparse
import sys

from lsp_server import entry
from repocomp.errors import RepocompError

parser = argparse.ArgumentParser(prog="python -m lsp_server", description=entry.DESCRIPTION)
entry.add_arguments(parser)
args = parser.parse_args()
try:
    sys.exit(args.run(args))
except RepocompError as exc:
    print(f"repocomp: error: {exc}", file=sys.stderr)
    sys.exit(2)
