"""Definitions as context (issue 12): candidates from each source, ranking, rendering, the prompt section, the
shown-runs contract and no leak from the cursor on."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from configs import prompt_config

from graph.lookup import DefRef
from repocomp.backends.model_defaults import resolve_config
from repocomp.config.schema import Config, DefinitionsConfig
from repocomp.context.definitions import SCAN_CHARS, BufferState, Candidate, DefinitionFinder
from repocomp.context.render import render_definition
from repocomp.index import Index
from repocomp.pipeline import Completer, CompletionOptions
from repocomp.prompt.layout import BlockSource, DefinitionSource, DefinitionsSection, Place, build_prompt

LAYERS = '''\
SCALE = 4
OTHER = 5


def helper(x):
    """Help with x.

    Longer text that is not shown.
    """
    return x


@dataclass
@register(
    "encoder",
)
class Encoder(Base):
    """Encodes things.

    More text.
    """

    size = 3

    def __init__(
        self,
        dim: int,
    ) -> None:
        self.dim = dim

    @property
    def width(self):
        return self.dim

    def forward(self, x):
        """Run it."""
        return x

    def layernorm(self, x):
        return x

    def _private(self):
        pass
'''

BASE = '''\
class Base:
    def setup(self):
        pass

    def layer_count(self):
        return 1
'''

APP = '''\
import pkg.layers as L
from pkg.layers import helper, SCALE
from pkg.base import Base


class Model(Base):
    def __init__(self):
        self.enc = L.Encoder(SCALE)
        self.setup()

    def run(self, x):
        y = helper(x)
        z = self.enc.forward(y)
        self.enc.lay
'''

CALLER = '''\
from pkg.layers import helper, OTHER


def use():
    return helper(OTHER)
'''


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("defs_repo")
    (root / "pkg").mkdir()
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "layers.py").write_text(LAYERS.replace("class Encoder(Base)", "class Encoder"))
    (root / "pkg" / "base.py").write_text(BASE)
    (root / "app.py").write_text(APP)
    (root / "caller.py").write_text(CALLER)
    return root


@pytest.fixture(scope="module")
def index(repo: Path) -> Index:
    return Index.build(repo, Config())


def _one_block() -> Config:
    """A tiny repository's similar code covers nearly every file: one block leaves definitions to show."""
    return Config().replace("prompt", max_blocks=1)


def _state(index: Index, text: str, line: int, col: int, path: str = "app.py"):
    index.update_file(path, text=text)
    finder = DefinitionFinder(index, DefinitionsConfig())
    return finder, finder.buffer_state(path, text.split("\n"), line, col)


def _by_name(state: BufferState) -> dict[str, Candidate]:
    return {ref.name: cand for ref, cand in state.candidates.items()}


def test_candidates_from_each_source(index: Index) -> None:
    lines = APP.split("\n")
    cursor = len(lines) - 2  # "        self.enc.lay"
    finder, state = _state(index, APP, cursor, len(lines[cursor]))
    found = _by_name(state)
    sources = {name: {e.source for e in c.evidence} for name, c in found.items()}
    # from-import of a function, and of a module constant (rendered as its assignment)
    assert "import" in sources["helper"] and "reference" in sources["helper"]
    assert found["SCALE"].ref.kind == "constant" and found["SCALE"].ref.path == "pkg/layers.py"
    # aliased module import: `import pkg.layers as L` then `L.Encoder(...)`
    assert found["Encoder"].ref == DefRef("pkg/layers.py", found["Encoder"].ref.node, "Encoder", "class")
    assert any(e.line == 7 and e.note == "L.Encoder" for e in found["Encoder"].evidence)
    # the instantiated class's method through the attribute's type: self.enc = L.Encoder(...); self.enc.forward
    assert found["forward"].ref.kind == "method" and found["forward"].last_reference == 12
    # self.method reaches the enclosing class's base; the base itself is evidence
    assert found["setup"].ref.path == "pkg/base.py" and "reference" in sources["setup"]
    assert "base" in sources["Base"]
    # prefix match of the identifier at the cursor: self.enc.lay -> Encoder.layernorm
    assert found["layernorm"].prefix and sources["layernorm"] == {"prefix"}
    assert "forward" not in {n for n, c in found.items() if c.prefix}
    # nothing at or after the cursor was read: the line being typed is not a reference
    assert all(c.last_reference is None or c.last_reference < cursor for c in found.values())


def test_completers_over_one_index_share_its_symbol_lookup(index: Index) -> None:
    """A completer made anew (a setting changed) finds the method-name table made: it takes a pass over every
    file (about a second on a monorepo)."""
    lines = APP.split("\n")
    cursor = len(lines) - 2
    finder, state = _state(index, APP, cursor, len(lines[cursor]))
    again = DefinitionFinder(index, DefinitionsConfig(max_definitions=2))
    assert again.lookup is finder.lookup and again.lookup._seen_changes == index.resolver.changes
    assert _by_name(again.buffer_state("app.py", lines, cursor, len(lines[cursor]))).keys() == _by_name(state).keys()
    other = Index.build(index.root, index.config)  # its own symbols: its own lookup
    assert DefinitionFinder(other, DefinitionsConfig()).lookup is not finder.lookup


def test_a_loaded_index_prepared_has_its_method_table_made(index: Index) -> None:
    """`Index.prepare` (the language server, once a folder is ready) makes the lookup's method-name table, which
    the first request made before."""
    Index.build(index.root, index.config).save()
    loaded = Index.load(index.root, index.config)
    assert loaded.lookup._seen_changes == -1
    loaded.prepare()
    assert loaded.lookup._seen_changes == loaded.resolver.changes and "forward" in loaded.lookup._methods


def test_references_are_read_from_the_last_scan_chars_of_a_long_line(index: Index) -> None:
    # a minified file's one line: only its end before the cursor is scanned (the prompt shows no more of it)
    header = "\n".join(APP.split("\n")[:3])
    filler = "q = 1; " * (SCAN_CHARS // 7 + 10)
    text = f"{header}\ny = helper(1); {filler}z = SCALE + L.Encoder\n"
    finder, state = _state(index, text, 4, 0)
    sources = {name: {e.source for e in c.evidence} for name, c in _by_name(state).items()}
    assert "reference" in sources["SCALE"] and "reference" in sources["Encoder"]  # near the cursor
    assert sources["helper"] == {"import"}  # its use is more than SCAN_CHARS before the cursor
    assert all(len(code) <= SCAN_CHARS for code in state.code.values())
    index.update_file("app.py", text=APP)


def test_similar_fragments_calls_are_evidence(index: Index) -> None:
    finder, state = _state(index, APP, 12, 0)
    ranked = finder.rank(state, [("caller.py", 0, 5)])
    by_name = {r.ref.name: r for r in ranked}
    assert by_name["helper"].features["similar"] == 1.0
    assert any("similar fragments" in reason for reason in by_name["helper"].reasons)


def test_ranking_order_on_a_hand_made_case(index: Index) -> None:
    finder = DefinitionFinder(index, DefinitionsConfig(w_relation=0.0))
    state = BufferState("app.py", [""] * 101, 100)
    refs = {name: DefRef("pkg/x.py", i, name, "function") for i, name in enumerate("abcd")}
    state.candidates = {
        refs["a"]: Candidate(refs["a"], last_reference=99),  # near: 1 / (1 + 1/20) = 0.952
        refs["b"]: Candidate(refs["b"], imported_at=3),  # imported, unused: 0.25
        refs["c"]: Candidate(refs["c"], prefix=True),  # prefix: 1.0
        refs["d"]: Candidate(refs["d"], last_reference=50, imported_at=2),  # near 1 / (1 + 50/20) = 0.286
    }
    ranked = finder.rank(state)
    assert [r.ref.name for r in ranked] == ["c", "a", "d", "b"]
    assert ranked[1].score == pytest.approx(1 / (1 + 1 / 20), abs=1e-6)
    assert ranked[2].features["imported"] == 0.0  # imported but already used: distance speaks for it


def test_class_skeleton_with_decorators_multiline_signature_and_docstring(index: Index) -> None:
    index.update_file("pkg/layers.py", text=LAYERS)
    try:
        entry = index.files["pkg/layers.py"]
        node = next(n for n, name, _ in entry.parsed.defs if name == "Encoder")
        ref = DefRef("pkg/layers.py", node, "Encoder", "class")
        shown = render_definition(ref, entry.parsed, entry.lines, max_lines=40, docstring_lines=3)
        lines = LAYERS.split("\n")
        got = [lines[n] for n, _ in shown.lines]
        assert got == [
            "@dataclass", "@register(", '    "encoder",', ")", "class Encoder(Base):",
            '    """Encodes things.',
            "    size = 3",
            "    def __init__(", "        self,", "        dim: int,", "    ) -> None:",
            "    @property", "    def width(self):",
            "    def forward(self, x):",
            "    def layernorm(self, x):",
            "    def _private(self):",
        ]
        assert all(text == lines[n] for n, text in shown.lines)  # every shown line is the file's own
        assert len(shown.runs) > 1  # a skeleton is several runs of lines
        small = render_definition(ref, entry.parsed, entry.lines, max_lines=12, docstring_lines=3)
        assert len(small.lines) <= 12 and "    def __init__(" in [t for _, t in small.lines]
        fn = next(n for n, name, _ in entry.parsed.defs if name == "helper")
        helper = render_definition(DefRef("pkg/layers.py", fn, "helper", "function"), entry.parsed, entry.lines)
        assert [t for _, t in helper.lines] == ["def helper(x):", '    """Help with x.']
        const = next(n for n in range(entry.parsed.n_nodes) if entry.parsed.start_line[n] == 0
                     and entry.parsed.kinds[n] == "expression_statement")
        assert [t for _, t in render_definition(DefRef("pkg/layers.py", const, "SCALE", "constant"), entry.parsed,
                                                entry.lines).lines] == ["SCALE = 4"]
    finally:
        index.update_file("pkg/layers.py")


def _bpe_counter(tmp_path: Path):
    """A real byte-level BPE tokenizer, trained on the spot on this project's own code."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    corpus = [p.read_text() for p in sorted(Path(__file__).parent.parent.joinpath("repocomp").glob("*.py"))]
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=2000, show_progress=False,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return lambda text: len(tok.encode(text).ids)


def test_definitions_share_of_the_block_budget_with_a_real_tokenizer(tmp_path: Path) -> None:
    count = _bpe_counter(tmp_path)
    defs = [DefinitionSource(f"f{i}", f"pkg/m{i}.py",
                             tuple((n, f"def f{i}_{n}(alpha, beta, gamma):") for n in range(3)))
            for i in range(20)]
    sources = [BlockSource(i, (f"s{i}.py",), 0, 20, "\n".join(f"value_{i}_{n} = compute({n})" for n in range(20)))
               for i in range(30)]
    cfg = prompt_config(max_tokens=1500, context_tokens=300, max_blocks=30)
    prefix = "\n".join(f"line_{n} = {n}" for n in range(40))
    p = build_prompt(sources, prefix, "", cfg, count, definitions=DefinitionsSection(defs, share=0.25, max_n=20))
    budget = cfg.max_tokens - count(p.context)
    section = p.text[: p.text.index("# Here are some relevant code fragments")]
    assert p.definitions and p.blocks
    assert count(section) <= 0.25 * budget  # the definitions' share, counted on the prompt's own text
    assert count(p.text) <= cfg.max_tokens
    assert cfg.max_tokens - p.tokens < min(b.tokens for b in p.blocks)  # similar code fills the rest


def test_no_duplicate_of_what_is_visible() -> None:
    prefix = "def local(a):\n    return a\n\nx = "
    visible = DefinitionSource("local", "hole.py", ((10, "def local(a):"),))
    in_block = DefinitionSource("add", "pkg/util.py", ((10, "def add(a, b):"),))
    fresh = DefinitionSource("mul", "pkg/util.py", ((30, "def mul(a, b):"), (31, '    """Multiply."""')))
    block = BlockSource(7, ("pkg/util.py",), 5, 15, "\n".join(f"line{n}" for n in range(5, 15)))
    p = build_prompt([block], prefix, "", prompt_config(), definitions=DefinitionsSection([visible, in_block, fresh], share=0.5), place=Place("hole.py", 13))
    assert [m.name for d in p.definitions for m in d.members] == ["mul"]
    assert p.text.count("def local(a):") == 1 and "# def add" not in p.text


def test_overlapping_hits_merge_into_one_span_and_nothing_is_shown_twice() -> None:
    lines = [f"stmt_{n} = {n}" for n in range(60)]

    def src(fid: int, start: int) -> BlockSource:
        return BlockSource(fid, ("a.py",), start, start + 20, "\n".join(lines[start:start + 20]))

    p = build_prompt([src(1, 10), src(2, 20), src(3, 15), src(4, 40)], "x = ", "", prompt_config())
    spans = sorted((b.source.start_line, b.source.end_line) for b in p.blocks)
    assert spans == [(10, 30), (40, 60)] or spans == [(10, 40), (40, 60)] or spans == [(10, 60)]
    assert all(p.text.count(f"# {line}\n") == 1 for line in lines[10:60])
    off = build_prompt([src(1, 10), src(2, 20)], "x = ", "", prompt_config(merge_overlaps=False))
    assert len(off.blocks) == 2  # RepoCoder's own layout when asked


def test_context_entries_are_exact_shown_runs(repo: Path, index: Index) -> None:
    index.update_file("app.py")
    completer = Completer(index, resolve_config(Config().replace("prompt", max_blocks=0)))  # definitions only: all of them show
    text = APP
    lines = text.split("\n")
    res = completer.complete("app.py", text, 12, 0, CompletionOptions(trace=True))
    assert any(b.kind == "definition" for b in res.context)
    for b in res.context:
        file_lines = (repo / b.path).read_text().split("\n")
        assert b.text == "\n".join(file_lines[b.start_line:b.end_line])  # exactly those lines
        for line in file_lines[b.start_line:b.end_line]:
            assert f"# {line}\n" in res.prompt  # and each of them is in the prompt
    runs = Counter(b.name for b in res.context if b.kind == "definition")
    assert max(runs.values()) >= 2  # a skeleton shows several runs of lines: one entry each
    shown = [d for d in res.definitions if d.shown]
    assert shown and all(d.reasons for d in shown)
    assert lines[12] not in {b.text for b in res.context}


PLANT = "zqxplanted"


def test_nothing_at_or_after_the_cursor_reaches_the_definitions(repo: Path, index: Index) -> None:
    """A live buffer (as the language server holds it) whose code after the cursor defines what the code before
    it calls: neither that definition nor any line at or after the cursor may be shown."""
    text = APP.rstrip("\n").rsplit("\n", 1)[0] + "\n        later(" + "\n" * 3 + \
        f"\ndef later({PLANT}_arg):\n    '''{PLANT} doc'''\n    return 1\n"
    text = text.replace("        y = helper(x)", "        y = later(helper(x))")
    lines = text.split("\n")
    cursor = next(i for i, ln in enumerate(lines) if ln == "        later(")
    completer = Completer(index, resolve_config(_one_block()))
    try:
        res = completer.complete("app.py", text, cursor, len(lines[cursor]), CompletionOptions(trace=True))
        assert PLANT not in res.prompt
        assert all(not (b.path == "app.py" and b.end_line > cursor) for b in res.context)
        assert all(PLANT not in b.text for b in res.context)
        assert "later" not in {d.name for d in res.definitions if d.shown}
        assert res.definitions  # the definitions did run
    finally:
        index.update_file("app.py")


def test_no_definitions_and_plain_repocoder(index: Index) -> None:
    completer = Completer(index, resolve_config(_one_block()))
    on = completer.complete("app.py", APP, 12, 0, CompletionOptions(trace=True))
    off = completer.complete("app.py", APP, 12, 0, CompletionOptions(definitions=False, trace=True))
    plain = Completer(index, resolve_config(_one_block().plain_repocoder())).complete("app.py", APP, 12, 0,
                                                                                      CompletionOptions(trace=True))
    assert any(b.kind == "definition" for b in on.context)
    assert not any(b.kind == "definition" for b in off.context + plain.context)
    assert "# Here are definitions" in on.prompt and "# Here are definitions" not in off.prompt


async def test_a_buffer_synced_while_a_completion_awaits_the_model_leaves_it_consistent(index: Index) -> None:
    """Another request (an eval worker, a second editor buffer) replaces a file's parse while this completion
    awaits its first draft: the second round must not use references into the parse that is gone."""
    import asyncio

    from repocomp.backends import Generation, GenerationRequest
    from repocomp.backends.extractive import ExtractiveBackend

    class GatedExtractive(ExtractiveBackend):
        """The real extractive backend, held at its first answer until the test lets it go."""

        def __init__(self) -> None:
            super().__init__()
            self.entered, self.go = asyncio.Event(), asyncio.Event()

        async def agenerate(self, request: GenerationRequest) -> Generation:
            self.entered.set()
            await self.go.wait()
            return await super().agenerate(request)

    backend = GatedExtractive()
    completer = Completer(index, resolve_config(_one_block()), backend)
    lines = APP.split("\n")
    cursor = next(i for i, ln in enumerate(lines) if ln == "        self.enc.lay")
    try:
        task = asyncio.create_task(completer.acomplete("app.py", APP, cursor, len(lines[cursor]),
                                                       CompletionOptions(trace=True)))
        await asyncio.wait_for(backend.entered.wait(), 30)
        index.update_file("pkg/layers.py", text="SCALE = 4\n")  # helper and Encoder are gone
        backend.go.set()
        res = await asyncio.wait_for(task, 30)
        shown = {d.name for d in res.definitions if d.shown}
        assert shown and not shown & {"helper", "Encoder", "layernorm", "forward"}
        assert all("def helper" not in b.text for b in res.context if b.kind == "definition")
    finally:
        index.update_file("pkg/layers.py")


def test_the_method_table_follows_changed_files_as_a_fresh_one_would(index: Index) -> None:
    """The table of methods by name is brought up to date from the files whose symbols changed only (a large
    repository's table is not made again per request), and holds what a table made afresh holds."""
    from graph.lookup import SymbolLookup

    def table(lookup: SymbolLookup) -> dict[str, list[DefRef]]:
        lookup.refresh()
        return {name: sorted(ref for refs in owners.values() for ref in refs)
                for name, owners in lookup._methods.items()}

    kept = SymbolLookup(index.resolver, index.file_lines)
    table(kept)
    generation, changes = kept.generation, index.resolver.changes
    assert table(kept) == table(SymbolLookup(index.resolver, index.file_lines)) and kept.generation == generation
    index.update_file("pkg/base.py", text=BASE.replace("def setup(self)", "def forward(self)"))  # a name moves
    index.update_file("pkg/other.py", text="class Other:\n    def layer_count(self):\n        return 2\n")
    index.remove_file("pkg/layers.py")
    assert table(kept) == table(SymbolLookup(index.resolver, index.file_lines)) and kept.generation > generation
    assert index.resolver.changes > changes  # what tells the table to look at the files again
    assert kept.unique_method("forward") == DefRef("pkg/base.py", kept.unique_method("forward").node, "forward",
                                                   "method")
    assert kept.unique_method("layer_count") is None and kept.unique_method("setup") is None


def test_a_module_constant_is_found_in_the_file_as_it_is_now(index: Index) -> None:
    """The constants of a module are found once per parse of it, and again after the file changed."""
    from graph.lookup import SymbolLookup

    lookup = SymbolLookup(index.resolver, index.file_lines)
    path = "pkg/limits.py"
    index.update_file(path, text="SCALE = 4\n\n\ndef helper(x):\n    return x\n")
    first = lookup.constant(index.resolver.files[path], "SCALE")
    assert first is not None and index.resolver.files[path].parsed.start_line[first.node] == 0
    assert lookup.constant(index.resolver.files[path], "helper") is None  # a function, not an assignment
    index.update_file(path, text="import os\n\nDEPTH: int = 2\nSCALE == 3\n")
    assert lookup.constant(index.resolver.files[path], "SCALE") is None  # a comparison, not an assignment
    depth = lookup.constant(index.resolver.files[path], "DEPTH")
    assert depth is not None and index.resolver.files[path].parsed.start_line[depth.node] == 2
    index.remove_file(path)

def test_the_method_table_reads_the_changed_paths_from_the_resolvers_log(index: Index) -> None:
    """After its first look, the table is brought up to date from the paths the resolver logged as changed; once
    the log was trimmed (a long session), from a pass over the files again: both as a fresh table."""
    from graph.lookup import SymbolLookup

    lookup = SymbolLookup(index.resolver, index.file_lines)
    lookup.refresh()
    resolver = index.resolver
    start = resolver.changes
    index.update_file("pkg/other.py", text="class Other:\n    def forward(self):\n        return 2\n")
    index.update_file("pkg/base.py", text=BASE + "\nLIMIT = 3\n")
    index.update_file("pkg/other.py", text="class Other:\n    def measure_depth(self):\n        return 2\n")
    assert resolver.changed_since(start) == ["pkg/other.py", "pkg/base.py"]  # each once
    lookup.refresh()
    fresh = SymbolLookup(resolver, index.file_lines)
    fresh.refresh()
    assert lookup._methods == fresh._methods and "measure_depth" in lookup._methods
    seen = resolver.changes
    for k in range(2 * len(resolver.files) + 1100):  # past the log's bound: it starts again
        index.update_file("pkg/other.py", text=f"class Other:\n    def step_{k % 3}(self):\n        return 2\n")
    assert resolver.changed_since(seen) is None and resolver.changed_since(resolver.changes) == []
    lookup.refresh()
    fresh = SymbolLookup(resolver, index.file_lines)
    fresh.refresh()
    assert lookup._methods == fresh._methods and "measure_depth" not in lookup._methods
