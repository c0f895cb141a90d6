"""The packages depend one way: graph <- repocomp (the engine) <- lsp_server <- lsp_bench (the server's benchmark
drivers) <- repocomp.cli (the top layer).

Every import counts, also those inside functions (imported lazily to keep start-up fast): a lazy import is still
a dependency, and a cycle through one is still a cycle. Within the layers no two modules import each other, directly
or round a longer loop (imports made only for type checking aside: they never run).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
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


def _modules() -> dict[str, Path]:
    found = {}
    for top in ("graph", "repocomp", "lsp_server", "lsp_bench"):
        for path in sorted((ROOT / top).rglob("*.py")):
            found[".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")] = path
    return found


def runtime_imports(path: Path, module: str, modules: Iterable[str], type_checking: bool = False) -> set[str]:
    """The project's modules `module` imports when it runs (at the top or inside a function; under
    `if TYPE_CHECKING:` only with `type_checking`); `from package import name` is the submodule `package.name`
    when there is one."""
    known = set(modules)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    typing_only = set() if type_checking else {
        id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for stmt in node.body for n in ast.walk(stmt)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{node.module}" if node.module else parent
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in known:  # `a.b.c` of a function or class: its module
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return groups


def test_no_two_modules_import_each_other() -> None:
    modules = _modules()
    graph = {m: runtime_imports(p, m, modules) for m, p in modules.items()}
    assert import_cycles(graph) == []


def test_the_cycle_checker_sees_a_lazy_loop_and_ignores_type_checking_imports(tmp_path: Path) -> None:
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import x\n")
    b.write_text("def f():\n    from pkg import a\n")
    modules = ["pkg", "pkg.a", "pkg.b"]
    graph = {"pkg.a": runtime_imports(a, "pkg.a", modules), "pkg.b": runtime_imports(b, "pkg.b", modules)}
    assert graph == {"pkg.a": set(), "pkg.b": {"pkg.a"}} and import_cycles(graph) == []
    a.write_text("import pkg.b.x\n")  # now at run time: a loop through a lazy import
    graph["pkg.a"] = runtime_imports(a, "pkg.a", modules)
    assert import_cycles(graph) == [["pkg.a", "pkg.b"]]
    assert import_cycles({"x": {"y"}, "y": {"z"}, "z": {"x"}, "w": {"x"}}) == [["x", "y", "z"]]


def test_the_checker_sees_lazy_and_relative_imports(tmp_path: Path) -> None:
    source = tmp_path / "mod.py"
    source.write_text("def f():\n    from repocomp.cli import main\n\nfrom .sibling import x\n")
    assert imports_of(source, "lsp_server.mod") == {"repocomp.cli", "lsp_server.sibling"}
    assert layer_of("repocomp.cli.serve") == 4 and layer_of("lsp_bench.nvim") == 3 and layer_of("repocomp.index") == 1
    assert layer_of("numpy") is None


def test_repocomps_top_level_holds_few_modules_the_stages_are_packages() -> None:
    """A request's stages are packages (index, memory, context, prompt, backends); what every stage reads stays at
    the top: at most 8 modules there."""
    top = sorted(p.name for p in (ROOT / "repocomp").glob("*.py") if p.name != "__init__.py")
    assert len(top) <= 8, top
    assert {"context", "prompt", "backends", "index", "memory"} <= {p.name for p in (ROOT / "repocomp").iterdir()
                                                                      if (p / "__init__.py").is_file()}
