"""The packages depend one way: graph <- repocomp (the engine) <- lsp_server <- lsp_bench (the server's benchmark
drivers) <- repocomp.cli (the top layer).

Every import counts, also those inside functions (imported lazily to keep start-up fast): a lazy import is still
a dependency, and a cycle through one is still a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# lower numbers are lower layers; a module may import its own layer and those below
LAYERS = (("graph", 0), ("repocomp", 1), ("lsp_server", 2), ("lsp_bench", 3), ("repocomp.cli", 4),
          ("repocomp.__main__", 4))


def layer_of(module: str) -> int | None:
    best = None
    for prefix, level in LAYERS:  # the longest matching prefix wins: repocomp.cli is above repocomp
        if module == prefix or module.startswith(prefix + "."):
            if best is None or len(prefix) > len(best[0]):
                best = (prefix, level)
    return None if best is None else best[1]


def imports_of(path: Path, module: str) -> set[str]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the importing package
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                found.add(f"{base}.{node.module}" if node.module else base)
            elif node.module:
                found.add(node.module)
    return found


def test_no_module_imports_a_layer_above_its_own() -> None:
    upward = []
    for top in ("graph", "repocomp", "lsp_server", "lsp_bench"):
        for path in sorted((ROOT / top).rglob("*.py")):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            own = layer_of(module)
            for imported in imports_of(path, module):
                target = layer_of(imported)
                if own is not None and target is not None and target > own:
                    upward.append(f"{module} imports {imported}")
    assert upward == []


def test_the_checker_sees_lazy_and_relative_imports(tmp_path: Path) -> None:
    source = tmp_path / "mod.py"
    source.write_text("def f():\n    from repocomp.cli import main\n\nfrom .sibling import x\n")
    assert imports_of(source, "lsp_server.mod") == {"repocomp.cli", "lsp_server.sibling"}
    assert layer_of("repocomp.cli.serve") == 4 and layer_of("lsp_bench.nvim") == 3 and layer_of("repocomp.index") == 1
    assert layer_of("numpy") is None
