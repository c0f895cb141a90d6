"""The language server's command line (`repocomp serve`, `python -m lsp_server`): stdio (default) or TCP.

Logs never go to stdout (the protocol). It lives here, not in `repocomp.cli`, so that the server package never
imports the CLI: the CLI is the top layer (tests/test_layers.py).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from repocomp.errors import RepocompError

_OUR_LOGGERS = ("repocomp", "lsp_server", "graph")


DESCRIPTION = "Run the repocomp language server. Editors start it on stdio; --tcp serves one client on a port."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tcp", metavar="HOST:PORT", help="listen on TCP instead of stdio, e.g. 127.0.0.1:2087")
    parser.add_argument("--log-file", type=Path, metavar="F", help="also write the server's log to this file")
    parser.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"),
                        help="level for window/logMessage and the log file (default: info)")
    parser.add_argument("--no-index", action="store_true", help="do not index workspace folders (in-file context only)")
    parser.add_argument("--no-watch", action="store_true", help="do not watch the file system for outside changes")
    parser.set_defaults(run=run)


def _parse_tcp(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not (0 < int(port) < 65536):
        raise RepocompError(f"--tcp expects HOST:PORT (e.g. 127.0.0.1:2087), got {value!r}")
    return host or "127.0.0.1", int(port)


def run(args: argparse.Namespace) -> int:
    # pygls is loaded only when a server runs
    from lsp_server import transport
    from lsp_server.messages import LspLogHandler
    from lsp_server.server import create_server

    address = _parse_tcp(args.tcp) if args.tcp else None
    level = getattr(logging, args.log_level.upper())
    server = create_server(build_index=not args.no_index, watch_files=False if args.no_watch else None)

    root = logging.getLogger()
    for handler in list(root.handlers):  # stdout is the protocol: keep only stderr/file handlers
        stream = getattr(handler, "stream", None)
        if stream is not None and getattr(stream, "name", "") == "<stdout>":
            root.removeHandler(handler)
    formatter = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    handlers: list[logging.Handler] = [LspLogHandler(server.messages, level)]
    if args.log_file is not None:
        try:
            # a URI or buffer text may hold lone surrogates: escaped, never a "Logging error" traceback
            file_handler = logging.FileHandler(args.log_file, encoding="utf-8", errors="backslashreplace")
        except OSError as exc:
            raise RepocompError(f"cannot open log file {args.log_file}: {exc.strerror}") from None
        file_handler.setLevel(level)
        file_handler.setFormatter(formatter)
        handlers.append(file_handler)
    for name in _OUR_LOGGERS:
        logger = logging.getLogger(name)
        logger.setLevel(min(level, logger.getEffectiveLevel()))
        for handler in handlers:
            logger.addHandler(handler)
    if args.log_file is not None:
        for name in ("pygls",):
            logging.getLogger(name).addHandler(handlers[-1])

    # the LSP exit code: 0 after shutdown + exit, 1 for exit without shutdown
    if address is None:
        return transport.serve_stdio(server.protocol, finish=server.shutdown_all, close=server.shutdown)
    return transport.serve_tcp(server.protocol, *address, finish=server.shutdown_all, close=server.shutdown)
