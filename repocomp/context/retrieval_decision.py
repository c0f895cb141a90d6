"""Whether a request's prompt shows code retrieved from the repository at all (SCM's controller, for retrieval).

Repoformer found that most retrievals do not help a code model and that skipping them saves most of the latency;
SCM's controller decides per turn whether memory is worth its tokens. Here the rule is the RepoCoder query's own
evidence, with no threshold to tune: the query (the code just above the cursor) is compared, by the retriever's
Jaccard similarity over code tokens, with every window of the file above it that the prompt already shows, and
with the fragments retrieved for it. When the file holds a window at least as similar as the best retrieved
fragment, the in-file context already explains the cursor's line as well as the repository can, and the prompt
carries no retrieved code (half the tokens to prefill on the local model); otherwise retrieval goes on as always.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from repocomp.tokenize import code_tokens

__all__ = ["RetrievalDecision", "decide"]


@dataclass(frozen=True)
class RetrievalDecision:
    retrieve: bool  # the prompt shows the retrieved code
    in_file: float  # the best similarity of the query to a window of the file above it, in view
    repository: float  # the best similarity of the query to a retrieved fragment


def _jaccard(a: set[str], b: set[str]) -> float:
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def decide(query: str, above: Sequence[str], fragments: Sequence[str], window: int) -> RetrievalDecision:
    """The decision for `query`, given `above` (the in-file lines in view above the query's own lines) and the texts
    of the retrieved fragments; windows of `window` lines, as the index's fragments."""
    terms = set(code_tokens(query))
    repository = max((_jaccard(terms, set(code_tokens(text))) for text in fragments), default=0.0)
    line_terms = [set(code_tokens(line)) for line in above]
    in_file = 0.0
    for start in range(max(1, len(line_terms) - window + 1)):
        seen: set[str] = set().union(*line_terms[start:start + window])
        in_file = max(in_file, _jaccard(terms, seen))
    return RetrievalDecision(retrieve=repository > in_file, in_file=round(in_file, 4),
                             repository=round(repository, 4))
