"""Text that is not valid Unicode, made encodable where it leaves the program.

Python carries what UTF-8 cannot hold as lone surrogates: an undecodable byte of a file name becomes U+DC80..U+DCFF
(`os.fsdecode`'s surrogateescape: byte 0xff is U+DCFF), and half a UTF-16 pair an editor sends (`"\\ud800"` in
JSON) stays U+D800. Every UTF-8 encoder refuses them (a terminal, an HTTP body, a tokenizer), so each boundary
where text leaves (printing, a prompt for a model, a token count) passes it through `encodable` first: one rule
everywhere, and a prompt's token count is the count of the text actually sent.
"""

from __future__ import annotations

import re

__all__ = ["encodable"]

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # an undecodable byte of a name: shown as that byte
        return f"\\x{code - 0xDC00:02x}"
    return f"\\u{code:04x}"


def encodable(text: str) -> str:
    """`text` with every lone surrogate written as a visible escape (`\\xff` for an undecodable byte, `\\ud800`
    otherwise); any other text comes back unchanged (the same object)."""
    if text.isascii():  # the common case, without a scan
        return text
    return _LONE_SURROGATE.sub(_escape, text)
