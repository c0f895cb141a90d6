"""The language server's modules import one way, type-checking imports included (tests/test_layers.py checks
the run-time imports of every package): the protocol and the transport know nothing of the server, the engines
nothing of how the user is told."""

from __future__ import annotations

from test_layers import ROOT, import_cycles, runtime_imports


def server_graph() -> dict[str, set[str]]:
    paths = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
             for p in sorted((ROOT / "lsp_server").rglob("*.py"))}
    return {m: runtime_imports(p, m, paths, type_checking=True) for m, p in paths.items()}


def test_no_cycle_among_the_servers_modules_counting_type_checking_imports() -> None:
    assert import_cycles(server_graph()) == []


def test_protocol_transport_and_engines_do_not_know_the_server() -> None:
    graph = server_graph()
    for module in ("protocol", "transport", "engines", "request", "progress", "messages", "buffers", "stats"):
        assert "lsp_server.server" not in graph[f"lsp_server.{module}"], module
    assert "lsp_server.transport" not in graph["lsp_server.server"]  # lsp_server.entry starts the transport
    assert "lsp_server.messages" not in graph["lsp_server.engines"]  # it is handed a warn(kind, message) callback


def test_the_server_imports_no_private_name_of_repocomp_or_graph() -> None:
    """What the server needs from the index and the graph is their public interface (e.g. `warm_kernels`)."""
    import ast

    private = []
    for path in sorted((ROOT / "lsp_server").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ("repocomp", "graph"):
                private += [f"{path.name}: {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    assert private == []
