"""RepoCoder prompt layout under a token budget, with optional fill-in-the-middle formatting.

Layout (RepoCoder's `build_prompt.py`):

    # Here are some relevant code fragments from other files of the repo:
    # --------------------------------------------------
    # the below code fragment can be found in:
    # <path>                      (one line per location)
    # --------------------------------------------------
    # <fragment line>             (each line comment-prefixed)
    # --------------------------------------------------
    ... more blocks, least similar first: each block is inserted at the front, so the best is nearest the code
    # Recent edits in this session:          (the session memory's entries, when the controller chose some)
    # --------------------------------------------------
    # <path> (line N):
    # <edited line>
    # - <thought: one compact line>
    # --------------------------------------------------
    <blank line>
    <in-file context>

Blocks are taken best-first; one that does not fit the remaining budget is skipped (a smaller later one may
still fit); at most `max_blocks`. The in-file context keeps the last lines before the cursor that fit
`context_tokens`; the blocks get what the context left of `max_tokens`.

Every line above the in-file context is commented out with the line comment of the cursor file's language (`#`
above; `//` for Java, JavaScript/TypeScript, Go, Rust, C/C++: `repocomp.prompt.languages`).

`[prompt] layout = "files"` (`RepoFiles`) lays the same sections out as Qwen2.5-Coder's repository files: the
repository's name, each block as `<|file_sep|>PATH` and its code as is, the cursor's file last; with `fim = "qwen"`
its code before the cursor, the code after it and `<|fim_middle|>` in that model's fill-in-the-middle tokens.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from repocomp.config.schema import FIM_FORMATS, DefinitionsConfig, PromptConfig
from repocomp.errors import RepocompError
from repocomp.prompt.languages import rules_for, rules_for_path
from repocomp.prompt.suffix import reads_suffix, suffix_lines
from repocomp.text import encodable
from repocomp.tokenize import code_tokens

__all__ = [
    "BlockSource",
    "DefinitionBlock",
    "DefinitionSource",
    "DefinitionsSection",
    "Place",
    "RecentSection",
    "Markers",
    "Prompt",
    "RecentSource",
    "PromptBlock",
    "ShownRun",
    "TokenCounter",
    "build_prompt",
    "estimate_tokens",
    "format_fim",
    "make_token_counter",
    "render_block",
    "render_definition_block",
    "DEFINITIONS_HEADER",
    "HEADER",
    "SEPARATOR",
]

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class Markers:
    """The prompt's fixed lines, commented out with one language's line comment (`comment`)."""

    comment: str = "#"

    @property
    def separator(self) -> str:
        return f"{self.comment} " + "-" * 50

    @property
    def header(self) -> str:
        return f"{self.comment} Here are some relevant code fragments from other files of the repo:\n{self.separator}\n"

    @property
    def found_in(self) -> str:
        return f"{self.comment} the below code fragment can be found in:"

    @property
    def definitions_header(self) -> str:
        return f"{self.comment} Here are definitions from the repo that the code below uses:\n{self.separator}\n"

    @property
    def recent_header(self) -> str:
        return f"{self.comment} Recent edits in this session:\n{self.separator}\n"

    @property
    def recent_footer(self) -> str:
        return self.separator + "\n"

    def line(self, text: str) -> str:
        return f"{self.comment} {text}"

    def code(self, text: str) -> str:
        """A line of repository code as a block shows it."""
        return self.line(text)

    def file_header(self, paths: Sequence[str]) -> str:
        return "\n".join([self.found_in, *(self.line(p) for p in paths), self.separator]) + "\n"

    def file_footer(self) -> str:
        return self.separator + "\n"

    def definition_header(self, path: str) -> str:
        return self.line(path) + "\n"

    def recent_entry(self, path: str, where: str, lines: Sequence[str]) -> str:
        """An edited run of lines: `where` (a line number, what it is) says which, then the lines."""
        return self.line(f"{path} {where}") + "\n" + "".join(self.line(line) + "\n" for line in lines)

    def preamble(self, repo: str) -> str:
        """What opens the prompt (nothing: RepoCoder's sections say what they are)."""
        return ""

    def current_file(self, path: str) -> str:
        """What stands between the context sections and the code before the cursor."""
        return "\n"


@dataclass(frozen=True)
class RepoFiles(Markers):
    """Qwen2.5-Coder's repository layout: `<|repo_name|>NAME`, then every context block as a file of its own,
    `<|file_sep|>PATH` and its code as is, then `<|file_sep|>CURRENT_PATH` and the code before the cursor. Notes
    that are not code (a thought, the edit a block comes from) stay comments of the cursor file's language."""

    @property
    def header(self) -> str:
        return ""

    @property
    def definitions_header(self) -> str:
        return ""

    @property
    def recent_header(self) -> str:
        return ""

    @property
    def recent_footer(self) -> str:
        return ""

    def code(self, text: str) -> str:
        return text

    def file_header(self, paths: Sequence[str]) -> str:
        return f"{FILE_SEP}{paths[0]}\n"

    def file_footer(self) -> str:
        return ""

    def definition_header(self, path: str) -> str:
        return self.file_header([path])

    def recent_entry(self, path: str, where: str, lines: Sequence[str]) -> str:
        return self.file_header([path]) + self.line(where) + "\n" + "".join(line + "\n" for line in lines)

    def preamble(self, repo: str) -> str:
        return f"{REPO_NAME}{repo}\n"

    def current_file(self, path: str) -> str:
        return f"{FILE_SEP}{path}\n"


REPO_NAME, FILE_SEP = "<|repo_name|>", "<|file_sep|>"
PYTHON_MARKERS = Markers("#")
SEPARATOR = PYTHON_MARKERS.separator
HEADER = PYTHON_MARKERS.header
_FOUND_IN = PYTHON_MARKERS.found_in
DEFINITIONS_HEADER = PYTHON_MARKERS.definitions_header
RECENT_HEADER = PYTHON_MARKERS.recent_header

TokenCounter = Callable[[str], int]


def estimate_tokens(text: str) -> int:
    """Deterministic stand-in for a BPE tokenizer: code tokens plus one per line break (indentation/newlines)."""
    return len(code_tokens(text)) + text.count("\n")


def make_token_counter(config: PromptConfig) -> TokenCounter:
    """The model's own tokenizer when `config.tokenizer` names a local directory, else `estimate_tokens`."""
    if not config.tokenizer:
        return estimate_tokens
    where = Path(config.tokenizer).expanduser()
    if (where / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        try:
            tok = Tokenizer.from_file(str(where / "tokenizer.json"))
        except Exception as exc:  # the tokenizers library raises bare Exceptions on bad files
            raise RepocompError(f"cannot load tokenizer {where / 'tokenizer.json'}: {exc}") from None
        return lambda text: len(tok.encode(encodable(text), add_special_tokens=False).ids)  # as sent
    if where.is_dir():
        try:
            from transformers import AutoTokenizer

            hf = AutoTokenizer.from_pretrained(str(where), local_files_only=True)
        except Exception as exc:  # ImportError or any loading failure: tell the user which directory failed
            raise RepocompError(f"cannot load tokenizer from {where}: {exc}; fix [prompt] tokenizer") from None
        return lambda text: len(hf.encode(encodable(text), add_special_tokens=False))
    raise RepocompError(f"[prompt] tokenizer = {config.tokenizer!r} is not a directory with a tokenizer; "
                        "set it to a local model/tokenizer directory or leave it empty for the built-in estimate")


@dataclass(frozen=True)
class BlockSource:
    """A retrieved fragment as it will be shown: its lines (possibly shifted) and every path it occurs in."""

    fragment_id: int
    paths: tuple[str, ...]
    start_line: int  # 0-based, of the shown lines in paths[0]
    end_line: int  # exclusive
    text: str


@dataclass(frozen=True)
class DefinitionSource:
    """A ranked definition as it may be shown: its file's lines (numbered) and why it was chosen."""

    name: str
    path: str
    lines: tuple[tuple[int, str], ...]  # (0-based line number, text), increasing
    score: float = 0.0
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class RecentSource:
    """A session memory entry as it may be shown: an edited run of lines (a hunk), the code the edit at the cursor
    replaced, or a thought (one line)."""

    kind: str  # "hunk", "replaced" or "thought"
    path: str
    start_line: int  # 0-based, of the hunk's lines in the file as it is now; -1 for a thought
    lines: tuple[str, ...]  # a hunk's lines; the replaced lines; a thought's one line

    def render(self, markers: Markers = PYTHON_MARKERS) -> str:
        if self.kind == "thought":
            return "".join(markers.line(f"- {line}") + "\n" for line in self.lines)
        where = f"(line {self.start_line + 1})"
        return markers.recent_entry(self.path, f"{where}, before the edit at the cursor:" if self.kind == "replaced"
                                    else f"{where}:", self.lines)


@dataclass(frozen=True)
class PromptBlock:
    source: BlockSource  # a merged span when several hits of one place were joined
    rendered: str
    tokens: int
    members: tuple[int, ...] = ()  # fragment ids whose lines this block shows (best first)


@dataclass(frozen=True)
class DefinitionBlock:
    """The chosen definitions of one file, in file order under one path line (a path is written once)."""

    path: str
    members: tuple[DefinitionSource, ...]  # best first; each with only the lines not visible elsewhere
    rendered: str
    tokens: int

    @property
    def lines(self) -> tuple[tuple[int, str], ...]:
        return tuple(sorted({n: (n, t) for m in self.members for n, t in m.lines}.values()))

    def owner(self, line: int) -> DefinitionSource:
        return next((m for m in self.members if any(n == line for n, _ in m.lines)), self.members[0])


@dataclass(frozen=True)
class ShownRun:
    """One contiguous run of file lines that the prompt shows (the unit evaluation metrics count)."""

    kind: str  # "similar" or "definition"
    path: str
    start_line: int  # 0-based
    end_line: int  # exclusive
    text: str
    block: int  # index of its block in Prompt.blocks / Prompt.definitions
    name: str = ""  # the definition whose lines these are


@dataclass(frozen=True)
class Prompt:
    text: str  # what the model receives (FIM-formatted when configured)
    blocks: tuple[PromptBlock, ...]  # similar code, in prompt order (best last)
    context: str  # in-file context kept before the cursor
    suffix: str  # in-file text kept after the cursor (FIM only; "" otherwise)
    tokens: int
    fim: str = "none"  # the fill-in-the-middle format this prompt was written in ("none": the prefix only)
    definitions: tuple[DefinitionBlock, ...] = ()  # in prompt order (best last)
    shown: tuple[ShownRun, ...] = ()  # every run of repository lines shown, definitions then similar code
    recent: tuple[RecentSource, ...] = ()  # the session memory's entries shown, in prompt order
    layout: Layout | None = None  # where its in-file context starts and what the sections had: to lay it again


@dataclass(frozen=True)
class Layout:
    """A prompt's layout, to lay a later one the same way (`build_prompt(layout=...)`) at the same cursor line or one
    written below it: its in-file context's first line counted back from the cursor's, and the budget its sections
    were packed in. With the same sections, the later prompt is the earlier one up to the earlier cursor's line: only
    what was typed since is new."""

    lines_above: int
    budget: int


def render_block(src: BlockSource, markers: Markers = PYTHON_MARKERS) -> str:
    body = "".join(markers.code(line) + "\n" for line in src.text.splitlines())
    return markers.file_header(src.paths) + body + markers.file_footer()


_CHARS_PER_TOKEN = 8  # generous: a longer average is rare even in minified code


def _line_end_that_fits(line: str, budget: int, count: TokenCounter) -> str:
    """The end of one line too long for `budget` tokens (minified code): its last `budget x 8` characters, then a
    quarter cut off the front until it fits, so a huge line costs a few counts of at most that many characters."""
    tail = line[-max(budget, 1) * _CHARS_PER_TOKEN :]
    while tail and count(tail + "\n") > budget:
        tail = tail[len(tail) // 4 + 1 :]
    return tail


def _tail_that_fits(text: str, budget: int, count: TokenCounter) -> str:
    """The longest run of whole last lines of `text` within `budget` tokens; the partial last line is always kept,
    cut to its end when it alone is over the budget."""
    lines = text.split("\n")
    kept: list[str] = []
    used = 0
    for i, line in enumerate(reversed(lines)):
        cost = count(line + "\n")
        if i > 0 and used + cost > budget:
            break
        if cost > budget:
            line = _line_end_that_fits(line, budget, count)
            cost = count(line + "\n")
        kept.append(line)
        used += cost
    return "\n".join(reversed(kept))


def _head_that_fits(text: str, budget: int, count: TokenCounter) -> str:
    lines = text.split("\n")
    kept: list[str] = []
    used = 0
    for line in lines:
        cost = count(line + "\n")
        if used + cost > budget:
            break
        kept.append(line)
        used += cost
    return "\n".join(kept)


_FIM_TEMPLATES = {  # keyed by config.FIM_FORMATS
    "none": "{prefix}",
    "codellama": "<PRE> {prefix} <SUF>{suffix} <MID>",
    "starcoder": "<fim_prefix>{prefix}<fim_suffix>{suffix}<fim_middle>",
    "qwen": "<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>",
}
assert tuple(_FIM_TEMPLATES) == FIM_FORMATS


def format_fim(fim: str, prefix: str, suffix: str) -> str:
    """Fill-in-the-middle prompt: Code Llama's `<PRE> {prefix} <SUF>{suffix} <MID>` or StarCoder's tokens."""
    template = _FIM_TEMPLATES.get(fim)
    if template is None:
        raise ValueError(f"unknown fim format {fim!r}")
    return template.format(prefix=prefix, suffix=suffix)  # braces in the code are values, never parsed


class _Shown:
    """Lines of each file already in the prompt (in-file context, blocks, definitions)."""

    def __init__(self) -> None:
        self.spans: dict[str, list[tuple[int, int]]] = {}

    def add(self, path: str, start: int, end: int) -> None:
        if start < end:
            self.spans.setdefault(path, []).append((start, end))

    def covered(self, path: str, line: int) -> bool:
        return self.overlaps(path, line, line + 1)

    def overlaps(self, path: str, start: int, end: int, skip: Sequence[tuple[int, int]] = ()) -> bool:
        """Whether a shown span (other than those in `skip`) has a line in [start, end)."""
        return start < end and any(s < end and start < e for s, e in self.spans.get(path, ()) if (s, e) not in skip)

    def uncovered(self, path: str, start: int, end: int) -> list[tuple[int, int]]:
        """The maximal runs of [start, end) no shown span covers, in order (interval arithmetic: this runs for
        every candidate block of every request)."""
        runs: list[tuple[int, int]] = []
        at = start
        for s, e in sorted(span for span in self.spans.get(path, ()) if span[0] < end and start < span[1]):
            if s > at:
                runs.append((at, s))
            at = max(at, e)
        if at < end:
            runs.append((at, end))
        return runs

    def remove(self, path: str, span: tuple[int, int]) -> None:
        self.spans[path].remove(span)


@dataclass
class _Span:
    """A similar-code block being packed: one contiguous span of one file."""

    rank: int  # the best source it holds (sources are best-first)
    paths: tuple[str, ...]
    start: int
    end: int
    lines: dict[int, str]
    members: list[int]
    rendered: str = ""
    tokens: int = 0

    @property
    def path(self) -> str:
        return self.paths[0]

    def source(self) -> BlockSource:
        text = "\n".join(self.lines[n] for n in range(self.start, self.end))
        return BlockSource(self.members[0], self.paths, self.start, self.end, text)


class _Packer:
    """Greedy, best-first packing of similar-code sources into spans under a token limit.

    With `merge`, a source overlapping or touching a chosen span of the same file joins it (one header, no line
    twice), a source whose lines are all shown already costs nothing, and one that overlaps lines shown by the
    in-file context or a definition keeps its longest unshown run. Without it, RepoCoder's blocks as they come.
    """

    def __init__(self, count: TokenCounter, shown: _Shown, merge: bool, max_blocks: int,
                 markers: Markers = PYTHON_MARKERS) -> None:
        self.count = count
        self.markers = markers
        self.shown = shown
        self.merge = merge
        self.max_blocks = max_blocks
        self.spans: list[_Span] = []
        self.tokens = 0
        self.taken: set[int] = set()  # source ranks placed (or made redundant)

    def _price(self, span: _Span) -> _Span:
        span.rendered = render_block(span.source(), self.markers)
        span.tokens = count_lines(span.rendered, self.count)
        return span

    def offer(self, rank: int, src: BlockSource, limit: int) -> None:
        if rank in self.taken:
            return
        lines = dict(zip(range(src.start_line, src.end_line), src.text.split("\n")))
        if not self.merge:
            if len(self.spans) >= self.max_blocks:
                return
            span = self._price(_Span(rank, src.paths, src.start_line, src.end_line, lines, [src.fragment_id]))
            self._place(span, [], limit)
            return
        path = src.paths[0]
        free = self.shown.uncovered(path, src.start_line, src.end_line)
        if not free:
            self.taken.add(rank)  # everything it would show is in the prompt already
            return
        near = [sp for sp in self.spans if sp.path == path and sp.start <= src.end_line and src.start_line <= sp.end]
        if near:
            start = min([src.start_line, *(sp.start for sp in near)])
            end = max([src.end_line, *(sp.end for sp in near)])
            own = [(sp.start, sp.end) for sp in near]
            if self.shown.overlaps(path, start, end, own):
                return  # joining would repeat a definition's or the in-file context's lines
            for sp in near:
                lines.update(sp.lines)
            members = [m for sp in sorted(near, key=lambda sp: sp.rank) for m in sp.members]
            members = [src.fragment_id, *members] if rank < min(sp.rank for sp in near) else [*members, src.fragment_id]
            merged = _Span(min(rank, *(sp.rank for sp in near)), (path,), start, end, lines, members)
            self._place(self._price(merged), near, limit)
            return
        if len(self.spans) >= self.max_blocks:
            return
        start, end = max(free, key=lambda r: r[1] - r[0])
        paths = src.paths if (start, end) == (src.start_line, src.end_line) else (path,)
        self._place(self._price(_Span(rank, paths, start, end, lines, [src.fragment_id])), [], limit)

    def _place(self, span: _Span, replaces: list[_Span], limit: int) -> None:
        cost = span.tokens - sum(sp.tokens for sp in replaces)
        if self.tokens + cost > limit:
            log.debug("block of fragment %d (%d tokens) skipped: %d of %d used", span.members[0], cost,
                      self.tokens, limit)
            return
        for sp in replaces:
            self.spans.remove(sp)
            self.shown.remove(sp.path, (sp.start, sp.end))
        self.spans.append(span)
        self.shown.add(span.path, span.start, span.end)
        self.tokens += cost
        self.taken.add(span.rank)


def count_lines(text: str, count: TokenCounter) -> int:
    """Tokens of a rendered block, counted line by line: lines recur across candidate spans, rounds and requests,
    so a memoized counter sees each once (every block line starts with a comment, so no token spans two lines)."""
    return sum(count(line + "\n") for line in text.split("\n")[:-1])


def _elision(line: str, markers: Markers = PYTHON_MARKERS) -> str:
    return markers.code(" " * (len(line) - len(line.lstrip())) + "...") + "\n"


def render_definition_block(path: str, lines: Sequence[tuple[int, str]], markers: Markers = PYTHON_MARKERS) -> str:
    """The path, the lines in file order (an elision mark between runs), as the layout shows code: `# <path>`,
    comment-prefixed lines and a separator in RepoCoder's; a file of its own in the repository layout."""
    out = []
    prev = None
    for n, line in lines:
        if prev is not None and n != prev + 1:
            out.append(_elision(line, markers))
        out.append(markers.code(line) + "\n")
        prev = n
    return markers.definition_header(path) + "".join(out) + markers.file_footer()


def _group(members: Sequence[DefinitionSource], count: TokenCounter,
           markers: Markers = PYTHON_MARKERS) -> DefinitionBlock:
    path = members[0].path
    lines = sorted({n: (n, t) for m in members for n, t in m.lines}.values())
    rendered = render_definition_block(path, lines, markers)
    return DefinitionBlock(path, tuple(members), rendered, count_lines(rendered, count))


def _pick_definitions(definitions: Sequence[DefinitionSource], shown: _Shown, limit: int, max_n: int,
                      count: TokenCounter, markers: Markers = PYTHON_MARKERS,
                      in_view: tuple[str, int, int] | None = None) -> tuple[list[DefinitionBlock], int]:
    """Best first, each with the lines not yet visible, while the section fits `limit`; grouped by file
    (best file last in the prompt, nearest what follows). A definition with a line in `in_view` (path, start, end:
    the in-file context shown) is skipped whole: the code below shows it already, and its lines above the window
    alone (a header without its members) would only repeat it in part."""
    groups: dict[str, list[DefinitionSource]] = {}
    blocks: dict[str, DefinitionBlock] = {}
    used = n_chosen = 0
    for src in definitions:
        if n_chosen >= max_n:
            break
        if in_view is not None and src.path == in_view[0] and \
                any(in_view[1] <= n < in_view[2] for n, _ in src.lines):
            continue
        fresh = tuple((n, t) for n, t in src.lines if not shown.covered(src.path, n))
        if not fresh:
            continue  # already visible in the in-file context, a similar block or another definition
        if len(fresh) < len(src.lines):
            src = dataclasses.replace(src, lines=fresh)
        block = _group([*groups.get(src.path, []), src], count, markers)
        cost = block.tokens - (blocks[src.path].tokens if src.path in blocks else 0)
        if used + cost > limit:
            continue
        groups.setdefault(src.path, []).append(src)
        blocks[src.path] = block
        used += cost
        n_chosen += 1
        for n, _ in src.lines:
            shown.add(src.path, n, n + 1)
    return list(blocks.values()), used


def _runs(lines: Sequence[tuple[int, str]]) -> list[tuple[int, int, str]]:
    out: list[tuple[int, int, list[str]]] = []
    for n, text in lines:
        if out and out[-1][1] == n:
            out[-1] = (out[-1][0], n + 1, out[-1][2] + [text])
        else:
            out.append((n, n + 1, [text]))
    return [(s, e, "\n".join(t)) for s, e, t in out]


@dataclass(frozen=True)
class Place:
    """Where the prompt completes: the cursor's file (relative to the root) and 0-based line, which nothing else in
    the prompt repeats; the repository's name (the repository layout opens with it); the language whose line
    comment marks the sections (None: the path's; Python without a path)."""

    path: str = ""
    line: int = 0
    repo: str = ""
    language: str | None = None


@dataclass(frozen=True)
class DefinitionsSection:
    """The definitions the code before the cursor uses (best-first) and how many tokens and entries they may take:
    at most `share` of what the in-file context leaves, at most `max_n`, before similar code when `first`."""

    sources: Sequence[DefinitionSource] = ()
    share: float = 0.0
    max_n: int = 8
    first: bool = True

    @classmethod
    def of(cls, sources: Sequence[DefinitionSource], config: DefinitionsConfig,
           max_n: int | None = None) -> DefinitionsSection:
        return cls(sources, config.share, config.max_definitions if max_n is None else max_n,
                   config.position == "first")


@dataclass(frozen=True)
class RecentSection:
    """The session memory's choice (best-first) and the tokens its controller granted their lines."""

    entries: Sequence[RecentSource] = ()
    tokens: int = 0


@dataclass(frozen=True)
class _InFile:
    context: str  # the lines before the cursor that fit
    suffix: str  # the lines after it that fit (FIM only)
    tokens: int
    fim: str  # the FIM format the prompt is written in ("none" where the suffix is not read)


def build_prompt(sources: Sequence[BlockSource], prefix: str, suffix: str, config: PromptConfig,
                 count: TokenCounter = estimate_tokens, *, place: Place | None = None,
                 definitions: DefinitionsSection = DefinitionsSection(),
                 recent: RecentSection = RecentSection(), layout: Layout | None = None) -> Prompt:
    """Lay `sources` (similar code, best-first), the definitions, the session's recent entries and the in-file
    context (`prefix`, `suffix`) into one prompt within `config.max_tokens` (a resolved config:
    `repocomp.backends.model_defaults.resolve_prompt`).

    The blocks get what the in-file context leaves of the budget; definitions at most their share of that,
    similar code the rest (first up to its own share, then whatever the definitions left). Nothing is shown
    twice: lines of the in-file context (at `place`), of a chosen block or of a definition. With FIM the suffix
    shares the in-file budget (at most a quarter of it, whole lines from the cursor on). The recent entries are
    laid first, their lines within what the memory's controller granted and the whole section within the budget
    the in-file context left; their lines count as shown, so similar code does not repeat them.
    `config.layout`: RepoCoder's commented blocks, or repository files (`RepoFiles`: opened by the repository's
    name, the cursor's file named by its path). `layout`: an earlier prompt's, kept (its in-file context's
    first line and its sections' budget) where the budget would move them by a few tokens.
    """
    if config.max_tokens <= 0 or config.context_tokens <= 0 or "auto" in (config.fim, config.layout):
        raise ValueError("build_prompt takes a resolved PromptConfig: repocomp.backends.model_defaults.resolve_prompt first")
    place = place or Place()
    in_file = _in_file(prefix, suffix, config, count, layout.lines_above if layout is not None else None)
    markers = _markers(config, place)
    opening, closing = markers.preamble(place.repo or "repo"), markers.current_file(place.path)
    frame_tokens = count(opening) + count(closing) if opening else 0  # the repository layout's name lines
    budget = layout.budget if layout is not None else config.max_tokens - in_file.tokens - frame_tokens
    shown = _Shown()
    in_view = None
    if place.path:  # the in-file context's lines, the cursor's line included
        in_view = (place.path, place.line - in_file.context.count("\n"), place.line + 1)
        shown.add(*in_view)
    recent_shown, recent_used = _pick_recent(recent.entries, shown, recent.tokens, budget, count, markers)
    blocks, defs, packed_tokens = _pack(sources, definitions, budget - recent_used, shown, in_view, config, count,
                                        markers)
    head = _sections(blocks, defs, recent_shown, markers, definitions.first)
    head = opening + head + closing if opening else (head + closing if head else "")
    # the repository layout names the cursor's file before its code: FIM's prefix starts after that name
    text = head + format_fim(in_file.fim, in_file.context, in_file.suffix) if opening else \
        format_fim(in_file.fim, head + in_file.context, in_file.suffix)
    tokens = in_file.tokens + packed_tokens + recent_used + frame_tokens
    if recent_shown and not blocks and not defs:
        tokens += count("\n")
    return Prompt(text=text, blocks=blocks, context=in_file.context, suffix=in_file.suffix, tokens=tokens,
                  fim=in_file.fim,
                  definitions=defs, shown=_shown_runs(blocks, defs), recent=tuple(reversed(recent_shown)),
                  layout=Layout(in_file.context.count("\n"), budget) if _whole_lines(prefix, in_file.context) else None)


def _whole_lines(prefix: str, context: str) -> bool:
    """Whether the in-file context is whole lines of the prefix (not a line cut to its end: minified code)."""
    return context == prefix or prefix.endswith("\n" + context)


def _in_file(prefix: str, suffix: str, config: PromptConfig, count: TokenCounter,
             lines_above: int | None = None) -> _InFile:
    """The code around the cursor that fits `config.context_tokens` (or, given `lines_above`, that many whole lines
    above the cursor's and the cursor's): with FIM where `config.fim_at` reads the suffix
    (`repocomp.prompt.suffix`), its first `config.suffix_lines` lines within a quarter of the budget."""
    fim = config.fim
    if fim != "none" and suffix.strip() and not reads_suffix(config.fim_at, prefix, suffix):
        fim = "none"
    kept = ""
    if fim != "none" and suffix:
        kept = _head_that_fits(suffix_lines(suffix, config.suffix_lines), config.context_tokens // 4, count)
    kept_tokens = count(kept) if kept else 0
    if lines_above is not None:
        context = "\n".join(prefix.rsplit("\n", lines_above + 1)[-(lines_above + 1):])  # not the whole file split
    else:
        context = _tail_that_fits(prefix, config.context_tokens - kept_tokens, count)
    return _InFile(context, kept, count(context) + kept_tokens, fim)


def _markers(config: PromptConfig, place: Place) -> Markers:
    rules = rules_for(place.language) if place.language is not None or not place.path else rules_for_path(place.path)
    if config.layout == "files":
        return RepoFiles(rules.line_comment)
    return PYTHON_MARKERS if rules.line_comment == "#" else Markers(rules.line_comment)


def _pack(sources: Sequence[BlockSource], definitions: DefinitionsSection, budget: int, shown: _Shown,
          in_view: tuple[str, int, int] | None, config: PromptConfig, count: TokenCounter,
          markers: Markers) -> tuple[tuple[PromptBlock, ...], tuple[DefinitionBlock, ...], int]:
    """Similar code first within its own share, then the definitions within theirs, then similar code again in
    whatever the definitions left; (blocks, definition blocks, both in prompt order: best last; their tokens)."""
    blank = count("\n")
    similar_fixed = count(markers.header) + blank
    defs_fixed = count(markers.definitions_header) + blank  # the blank line, in case no similar block is shown
    share = int(budget * definitions.share) if definitions.sources and definitions.max_n > 0 else 0
    packer = _Packer(count, shown, config.merge_overlaps, config.max_blocks, markers)
    for rank, src in enumerate(sources):
        packer.offer(rank, src, budget - share - similar_fixed)
    picked, defs_used = _pick_definitions(definitions.sources, shown, share - defs_fixed, definitions.max_n, count,
                                          markers, in_view) if share > 0 else ([], 0)
    defs_tokens = defs_used + defs_fixed - blank if picked else 0
    for rank, src in enumerate(sources):
        packer.offer(rank, src, budget - defs_tokens - similar_fixed)
    ranked = sorted(packer.spans, key=lambda sp: sp.rank)
    blocks = tuple(PromptBlock(sp.source(), sp.rendered, sp.tokens, tuple(sp.members)) for sp in reversed(ranked))
    tokens = (packer.tokens + similar_fixed if blocks else 0) + defs_tokens
    if picked and not blocks:
        tokens += blank
    return blocks, tuple(reversed(picked)), tokens


def _sections(blocks: Sequence[PromptBlock], defs: Sequence[DefinitionBlock], recent: Sequence[RecentSource],
              markers: Markers, definitions_first: bool) -> str:
    """The sections above the in-file context: definitions and similar code (in the configured order), then what
    the developer just did, nearest the code."""
    similar_text = markers.header + "".join(b.rendered for b in blocks) if blocks else ""
    defs_text = markers.definitions_header + "".join(d.rendered for d in defs) if defs else ""
    head = defs_text + similar_text if definitions_first else similar_text + defs_text
    if recent:
        head += markers.recent_header + "".join(r.render(markers) for r in reversed(recent)) + markers.recent_footer
    return head


def _shown_runs(blocks: Sequence[PromptBlock], defs: Sequence[DefinitionBlock]) -> tuple[ShownRun, ...]:
    runs = [ShownRun("definition", d.path, s, e, t, i, d.owner(s).name) for i, d in enumerate(defs)
            for s, e, t in _runs(d.lines)]
    runs += [ShownRun("similar", b.source.paths[0], b.source.start_line, b.source.end_line, b.source.text, i)
             for i, b in enumerate(blocks)]
    return tuple(runs)


def _pick_recent(recent: Sequence[RecentSource], shown: _Shown, content_budget: int, budget: int,
                 count: TokenCounter, markers: Markers = PYTHON_MARKERS) -> tuple[list[RecentSource], int]:
    """The memory entries whose lines fit `content_budget` (what the memory's controller granted) and whose whole
    section (header, path lines, separators) fits `budget`, best-first, skipping a hunk whose lines are all in view
    already; their lines count as shown."""
    if not recent or content_budget <= 0 or budget <= 0:
        return [], 0
    fixed = count(markers.recent_header) + count(markers.recent_footer)
    picked: list[RecentSource] = []
    used, content = fixed, 0
    for entry in recent:
        end = entry.start_line + len(entry.lines)
        if entry.kind == "hunk" and not shown.uncovered(entry.path, entry.start_line, end):
            continue
        cost, lines = count(entry.render(markers)), count("\n".join(entry.lines))
        if used + cost > budget or content + lines > content_budget:
            continue
        picked.append(entry)
        used, content = used + cost, content + lines
        if entry.kind == "hunk":
            shown.add(entry.path, entry.start_line, end)
    return (picked, used) if picked else ([], 0)
