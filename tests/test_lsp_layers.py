"""The language server's modules import one way, type-checking imports included (tests/test_layers.py checks
the run-time imports of every package): the protocol and the transport know nothing of the server, the engines
nothing of how the user is told."""

from __future__ import annotations

import ast
from pathlib import Path

from test_layers import ROOT, import_cycles


def all_imports(path: Path, module: str, known: set[str]) -> set[str]:
    """The lsp_server modules `module` imports anywhere: at the top, in functions, under `if TYPE_CHECKING:`."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module
                     for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in known:  # `a.b.c` of a function or class: its module
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


def server_graph() -> dict[str, set[str]]:
    paths = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
             for p in sorted((ROOT / "lsp_server").rglob("*.py"))}
    return {m: all_imports(p, m, set(paths)) for m, p in paths.items()}


def test_no_cycle_among_the_servers_modules_counting_type_checking_imports() -> None:
    assert import_cycles(server_graph()) == []


def test_protocol_transport_and_engines_do_not_know_the_server() -> None:
    graph = server_graph()
    for module in ("protocol", "transport", "engines", "request", "progress", "messages", "buffers", "stats"):
        assert "lsp_server.server" not in graph[f"lsp_server.{module}"], module
    assert "lsp_server.transport" not in graph["lsp_server.server"]  # lsp_server.entry starts the transport
    assert "lsp_server.messages" not in graph["lsp_server.engines"]  # it is handed a warn(kind, message) callback
