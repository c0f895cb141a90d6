"""MemGPT's model-directed paging, for code: the repository names a draft uses that its prompt does not define are
paged in from the archive (the index: their definitions) for one more round (`[retrieval] paging`)."""

from __future__ import annotations

import keyword
import re
from typing import TYPE_CHECKING

from graph.lookup import DefRef
from repocomp.context.definitions import CHAIN, RankedDefinition
from repocomp.context.retrieval import draft_query_lines

if TYPE_CHECKING:
    from repocomp.context.definitions import BufferState

__all__ = ["defines", "draft_names", "paged_definitions"]


def draft_names(partial: str, draft: str) -> list[tuple[str, ...]]:
    """The dotted names (`a.b.c` as parts) a draft writes, in order, once each: read as the cursor line's code
    continued (`self.ta` + `ble.get(` is `self.table.get`), those ending in the draft; keywords left out."""
    text = partial + draft
    out: list[tuple[str, ...]] = []
    for m in CHAIN.finditer(text):
        parts = tuple(m.group(0).split("."))
        if m.end() <= len(partial) or keyword.iskeyword(parts[0]) or parts in out:
            continue
        out.append(parts)
    return out


def defines(text: str, name: str) -> bool:
    """Whether `text` (a prompt) defines `name`: a `def`/`class` of it or an assignment to it at a line's start
    (comment-prefixed lines of the prompt's sections count)."""
    n = re.escape(name)
    return re.search(rf"\b(?:def|class)\s+{n}\b|^[#\s]*(?:self\.)?{n}\s*(?::[^=\n]*)?=(?!=)", text, re.M) is not None


def paged_definitions(state: BufferState, partial: str, draft: str, prompt_text: str, line: int,
                      max_n: int) -> list[RankedDefinition]:
    """The definitions of the repository names the draft uses (`a.b.c` chains, resolved as if written at the
    cursor: the file's imports, `self`, assigned types) that the prompt defines nowhere (no `def`/`class` of the
    name, no assignment to it, in any section: the session memory's shown entries are in the prompt too), at most
    `max_n`."""
    if state.lookup is None:
        return []
    ranked: list[RankedDefinition] = []
    seen: set[DefRef] = set()
    for parts in draft_names(partial, "\n".join(draft_query_lines(draft))):
        target = state.resolve(parts, line).last
        if target is None and len(parts) >= 2:  # `obj.method(...)` with obj of unknown type
            target = state.lookup.unique_method(parts[-1])
        ref = target if isinstance(target, DefRef) else None  # a module has no definition to show
        if ref is None or ref in seen or defines(prompt_text, ref.name):
            continue
        seen.add(ref)
        ranked.append(RankedDefinition(ref, 1.0, {}, (f"the draft uses {'.'.join(parts)}",)))
        if len(ranked) >= max_n:
            break
    return ranked
