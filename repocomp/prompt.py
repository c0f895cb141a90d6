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
    <blank line>
    <in-file context>

Blocks are taken best-first; one that does not fit the remaining budget is skipped (a smaller later one may
still fit); at most `max_blocks`. The in-file context keeps the last lines before the cursor that fit
`context_tokens`; the blocks get what the context left of `max_tokens`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from repocomp.config import PromptConfig
from repocomp.errors import RepocompError
from repocomp.tokenize import code_tokens

__all__ = [
    "BlockSource",
    "Prompt",
    "PromptBlock",
    "TokenCounter",
    "build_prompt",
    "estimate_tokens",
    "format_fim",
    "make_token_counter",
    "render_block",
    "HEADER",
    "SEPARATOR",
]

log = logging.getLogger(__name__)

SEPARATOR = "# " + "-" * 50
HEADER = "# Here are some relevant code fragments from other files of the repo:\n" + SEPARATOR + "\n"
_FOUND_IN = "# the below code fragment can be found in:"

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
        return lambda text: len(tok.encode(text, add_special_tokens=False).ids)
    if where.is_dir():
        try:
            from transformers import AutoTokenizer

            hf = AutoTokenizer.from_pretrained(str(where), local_files_only=True)
        except Exception as exc:  # ImportError or any loading failure: tell the user which directory failed
            raise RepocompError(f"cannot load tokenizer from {where}: {exc}; fix [prompt] tokenizer") from None
        return lambda text: len(hf.encode(text, add_special_tokens=False))
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
class PromptBlock:
    source: BlockSource
    rendered: str
    tokens: int


@dataclass(frozen=True)
class Prompt:
    text: str  # what the model receives (FIM-formatted when configured)
    blocks: tuple[PromptBlock, ...]  # in prompt order (best last)
    context: str  # in-file context kept before the cursor
    suffix: str  # in-file text kept after the cursor (FIM only; "" otherwise)
    tokens: int


def render_block(src: BlockSource) -> str:
    lines = [_FOUND_IN, *(f"# {p}" for p in src.paths), SEPARATOR]
    lines += [f"# {line}" for line in src.text.splitlines()]
    lines.append(SEPARATOR)
    return "\n".join(lines) + "\n"


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


def format_fim(fim: str, prefix: str, suffix: str) -> str:
    """Fill-in-the-middle prompt: Code Llama's `<PRE> {prefix} <SUF>{suffix} <MID>` or StarCoder's tokens."""
    if fim == "codellama":
        return f"<PRE> {prefix} <SUF>{suffix} <MID>"
    if fim == "starcoder":
        return f"<fim_prefix>{prefix}<fim_suffix>{suffix}<fim_middle>"
    if fim == "none":
        return prefix
    raise ValueError(f"unknown fim format {fim!r}")


def build_prompt(sources: Sequence[BlockSource], prefix: str, suffix: str, config: PromptConfig,
                 count: TokenCounter = estimate_tokens) -> Prompt:
    """Lay `sources` (best-first) and the in-file context into one prompt within `config.max_tokens`.

    With FIM the suffix shares the in-file budget (at most a quarter of it, whole lines from the cursor on).
    """
    fim = config.fim != "none"
    suffix_kept = _head_that_fits(suffix, config.context_tokens // 4, count) if fim and suffix else ""
    suffix_tokens = count(suffix_kept) if suffix_kept else 0
    context = _tail_that_fits(prefix, config.context_tokens - suffix_tokens, count)
    context_tokens = count(context) + suffix_tokens
    budget = config.max_tokens - context_tokens
    chosen: list[PromptBlock] = []
    used = count(HEADER) + count("\n")
    for src in sources:
        if len(chosen) >= config.max_blocks:
            break
        rendered = render_block(src)
        cost = count(rendered)
        if used + cost > budget:
            log.debug("block of fragment %d (%d tokens) skipped: %d of %d used", src.fragment_id, cost, used, budget)
            continue
        chosen.append(PromptBlock(src, rendered, cost))
        used += cost
    ordered = tuple(reversed(chosen))  # best block last, nearest the code
    head = HEADER + "".join(b.rendered for b in ordered) + "\n" if ordered else ""
    text = format_fim(config.fim, head + context, suffix_kept)
    tokens = (used if ordered else 0) + context_tokens  # "\n": the blank line before the code
    return Prompt(text=text, blocks=ordered, context=context, suffix=suffix_kept, tokens=tokens)
