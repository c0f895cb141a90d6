"""Offline, code-aware tokenization for sparse retrieval.

RepoCoder's reference similarity is a Jaccard over the model tokenizer's token sets; we need no vocabulary
download, so a regex lexer stands in: identifiers/keywords, numbers, multi-character operators and single
punctuation characters are tokens. Identifiers are kept whole (not split on camelCase/snake_case) because a
whole identifier match is the strongest signal that two code windows talk about the same thing.
"""

from __future__ import annotations

import re

__all__ = ["code_tokens"]

# Longest operators first so `**=` is one token, not `*`, `*`, `=`.
_OPERATORS = (
    r"\*\*=|//=|>>=|<<=|\.\.\.|->|:=|==|!=|<=|>=|\+=|-=|\*=|/=|%=|&=|\|=|\^=|\*\*|//|<<|>>|&&|\|\||::|\+\+|--|=>"
)
_TOKEN_RE = re.compile(
    r"[A-Za-z_\u00c0-\uffff][A-Za-z0-9_\u00c0-\uffff]*"  # identifiers and keywords (unicode letters too)
    r"|0[xXbBoO][0-9a-fA-F_]+|\d[\d_]*(?:\.\d+)?(?:[eE][+-]?\d+)?[A-Za-z]*"  # numbers: 0x1F, 1_000, 1e-5, 10L
    rf"|{_OPERATORS}"
    r"|[^\sA-Za-z0-9_]"  # any other single non-space character
)


def code_tokens(text: str) -> list[str]:
    """Tokens of `text` in order, with repetitions (BM25 needs term frequencies, Jaccard takes the set)."""
    return _TOKEN_RE.findall(text)
