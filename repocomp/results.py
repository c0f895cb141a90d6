"""What a completion returns: the answer, the context its final prompt showed and each round's trace.

The traces (`CompletionResult.context`, `.definitions`) are built only when a caller asks for them (`--explain`,
the evaluation's records): an editor's request needs the text alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from repocomp.context.definitions import RankedDefinition
    from repocomp.context.retrieval_decision import RetrievalDecision
    from repocomp.memory.controller import MemoryDecision
    from repocomp.prompt.layout import DefinitionSource, Prompt

__all__ = ["CompletionResult", "ContextBlock", "DefinitionTrace", "RoundTrace", "definition_traces",
           "shown_context"]


@dataclass
class ContextBlock:
    """Retrieved code; in `CompletionResult.context`, one contiguous run of lines the prompt shows."""

    fragment_id: int  # -1 for a definition
    path: str
    start_line: int  # 0-based, lines shown (after the first-round shift)
    end_line: int  # exclusive
    s_ind: float
    s_env: float
    s_rel: float  # for a definition: its ranking score
    text: str
    relations: list[str] = field(default_factory=list)  # edge types (filled only when explain=True)
    kind: str = "similar"  # "similar" or "definition"
    name: str = ""  # the definition's name
    reasons: list[str] = field(default_factory=list)  # why a definition was chosen


@dataclass
class DefinitionTrace:
    """A ranked definition candidate of the final round (for --explain)."""

    name: str
    kind: str  # "function", "class", "method" or "constant"
    path: str
    lines: list[int]  # 0-based lines its rendering shows
    score: float
    features: dict[str, float]
    reasons: list[str]
    shown: bool  # in the final prompt (False: budget, rank, or already visible)


@dataclass
class RoundTrace:
    query: str
    draft: str
    blocks: list[ContextBlock]  # retrieved, best-first (the ones that made it into the prompt are in context)
    at_time_limit: bool = False  # the backend's max_time_s cut the draft
    paged: tuple[str, ...] = ()  # a paging round: the names of the draft whose definitions it paged in


@dataclass
class CompletionResult:
    text: str
    backend: str
    context: list[ContextBlock]  # the final prompt's blocks, in prompt order (best last)
    prompt: str
    prompt_tokens: int
    rounds: list[RoundTrace]
    timings_ms: dict[str, float]
    error: str = ""  # why the configured backend did not answer (a fallback did), or why rounds were skipped
    fell_back: bool = False  # the configured backend failed and its fallback answered
    definitions: list[DefinitionTrace] = field(default_factory=list)  # ranked candidates, final round
    # the time limit ended the answer early, or the deadline left it empty
    cut_by_time: bool = False
    memory: MemoryDecision | None = None  # the session memory's controller: consulted or not, and what it chose
    # whether the prompt showed the retrieved code (`[retrieval] selective`; None: not decided, it always does)
    retrieval: RetrievalDecision | None = None


def shown_context(prompt: Prompt, retrieved: list[ContextBlock]) -> list[ContextBlock]:
    """One ContextBlock per contiguous run of repository lines the final prompt shows."""
    by_id = {b.fragment_id: b for b in retrieved}
    out = []
    for run in prompt.shown:
        if run.kind == "definition":
            d = prompt.definitions[run.block].owner(run.start_line)
            out.append(ContextBlock(-1, run.path, run.start_line, run.end_line, 0.0, 0.0, d.score, run.text,
                                    kind="definition", name=d.name, reasons=list(d.reasons)))
            continue
        block = prompt.blocks[run.block]
        best = next((by_id[m] for m in block.members if m in by_id), None)
        scores = (best.s_ind, best.s_env, best.s_rel) if best is not None else (0.0, 0.0, 0.0)
        out.append(ContextBlock(block.members[0] if block.members else -1, run.path, run.start_line,
                                run.end_line, *scores, run.text,
                                relations=list(best.relations) if best is not None else []))
    return out

def definition_traces(ranked: list[RankedDefinition], sources: list[DefinitionSource],
                       prompt: Prompt) -> list[DefinitionTrace]:
    shown = {(m.path, m.name) for d in prompt.definitions for m in d.members}
    rendered = {(s.path, s.name): [n for n, _ in s.lines] for s in sources}
    return [DefinitionTrace(r.ref.name, r.ref.kind, r.ref.path, rendered.get((r.ref.path, r.ref.name), []),
                            r.score, dict(r.features), list(r.reasons), (r.ref.path, r.ref.name) in shown)
            for r in ranked[:20]]
