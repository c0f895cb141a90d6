"""What the engine needs to know of a source language's lexical surface: its comments and string forms.

The prompt comments repository code out with the language's line comment; postprocessing's bracket scanner skips
comments and strings; the model-free backend skips comment-only lines. The language of a path comes from its
extension (`graph.languages.language_for`); an unknown extension gets Python's rules (the reference behaviour).
"""

from __future__ import annotations

from dataclasses import dataclass

from graph.languages import language_for

__all__ = ["LexicalRules", "PYTHON", "is_comment_line", "rules_for", "rules_for_path"]


@dataclass(frozen=True)
class LexicalRules:
    name: str
    line_comment: str  # "#" or "//"
    block_comment: tuple[str, str] | None  # ("/*", "*/") where the language has one
    quotes: tuple[str, ...]  # string delimiters, longest first ('"""' before '"')
    raw_strings: bool = False  # Rust's r"..." / r#"..."# (no escapes inside)
    braces: bool = False  # blocks are `{ ... }` (else indentation, Python)
    raw_quotes: tuple[str, ...] = ()  # those of `quotes` whose strings have no escapes (Go's backticks)
    lifetimes: bool = False  # `'` starts a char literal or a lifetime (`'a`), never a string (Rust)

    def is_comment_line(self, line: str) -> bool:
        """A line that holds nothing but a comment (or a block comment's `*` continuation)."""
        s = line.strip()
        if not s:
            return False
        if s.startswith(self.line_comment):
            return True
        if self.block_comment is not None:
            return s.startswith(self.block_comment[0]) or s.startswith("*/") or (s.startswith("*") and
                                                                                 not s.startswith("*="))
        return False


PYTHON = LexicalRules("python", "#", None, ('"""', "'''", '"', "'"))
_C_LIKE = ('"', "'")
_RULES: dict[str, LexicalRules] = {
    "python": PYTHON,
    "java": LexicalRules("java", "//", ("/*", "*/"), ('"""', '"', "'"), braces=True),
    "javascript": LexicalRules("javascript", "//", ("/*", "*/"), ('"', "'", "`"), braces=True),
    "typescript": LexicalRules("typescript", "//", ("/*", "*/"), ('"', "'", "`"), braces=True),
    "tsx": LexicalRules("tsx", "//", ("/*", "*/"), ('"', "'", "`"), braces=True),
    "go": LexicalRules("go", "//", ("/*", "*/"), ('"', "'", "`"), braces=True, raw_quotes=("`",)),
    "rust": LexicalRules("rust", "//", ("/*", "*/"), ('"',), raw_strings=True, braces=True, lifetimes=True),
    "c": LexicalRules("c", "//", ("/*", "*/"), _C_LIKE, braces=True),
    "cpp": LexicalRules("cpp", "//", ("/*", "*/"), _C_LIKE, braces=True),
}


def rules_for(language: str | None) -> LexicalRules:
    """The rules of a language name (graph.languages' names); Python's for None or an unknown name."""
    return _RULES.get(language or "python", PYTHON)


def rules_for_path(path: str) -> LexicalRules:
    return rules_for(language_for(path))


def is_comment_line(line: str, language: str | None) -> bool:
    return rules_for(language).is_comment_line(line)
