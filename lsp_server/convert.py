"""All conversion between LSP and the engine: URIs, positions (UTF-16/UTF-8/UTF-32 code units <-> Python str
indices), document checks, and completion results -> LSP items.

The engine speaks paths relative to an index root and buffers cut at the cursor (`repocomp.prompt.cursor.Cut`: 0-based
line / column in Python str indices, code points); LSP speaks URIs and columns in the negotiated position
encoding (UTF-16 by default).
Nothing here touches the server or the engine's state, so every function is testable on its own.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urlparse

from lsprotocol import types

from repocomp.prompt.cursor import Cut

UTF16 = "utf-16"
UTF8 = "utf-8"
UTF32 = "utf-32"

_WORD_CHAR = re.compile(r"[\w$]")


class ConversionError(Exception):
    """A request the server cannot serve; `kind` names the failure for the once-per-kind user warning."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def normalize_encoding(encoding: object) -> str:
    """The position encoding negotiated with the client as one of UTF16 / UTF8 / UTF32 (LSP's default: UTF-16)."""
    value = getattr(encoding, "value", encoding)
    if value in (UTF8, UTF32):
        return str(value)
    return UTF16


def _units(ch: str, encoding: str) -> int:
    cp = ord(ch)
    if encoding == UTF16:
        return 2 if cp > 0xFFFF else 1
    if encoding == UTF8:
        return 1 if cp < 0x80 else 2 if cp < 0x800 else 3 if cp < 0x10000 else 4
    return 1


def client_col_to_index(line: str, character: int, encoding: str = UTF16) -> int:
    """Python str index in `line` of a client column given in code units.

    A column past the end of the line means the end of the line (as the LSP spec asks); a column inside a
    multi-unit character (half a surrogate pair) lands after that character.
    """
    if character <= 0:
        return 0
    if encoding == UTF32:
        return min(character, len(line))
    units = 0
    for i, ch in enumerate(line):
        if units >= character:
            return i
        units += _units(ch, encoding)
    return len(line)


def index_to_client_col(line: str, index: int, encoding: str = UTF16) -> int:
    """Client column (code units in `encoding`) of Python str index `index` in `line`."""
    index = max(0, min(index, len(line)))
    if encoding == UTF32:
        return index
    return sum(_units(ch, encoding) for ch in line[:index])


def uri_to_path(uri: str) -> Path:
    """The local path of a `file:` URI; any other scheme is a ConversionError of kind "scheme"."""
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        raise ConversionError("scheme", f"repocomp completes local files only, not {parsed.scheme or 'bare'}: URIs")
    path = unquote(parsed.path, errors="surrogateescape")  # a byte that is not UTF-8 (%FF) names the same file
    if parsed.netloc and parsed.netloc != "localhost":
        path = f"//{parsed.netloc}{path}"
    if re.match(r"^/[A-Za-z]:", path):  # file:///C:/x on Windows
        path = path[1:]
    return Path(path)


def document_key(uri: str) -> str:
    """The one key of an open document in the server: the decoded URI, as pygls's workspace stores it (editors
    percent-encode spaces and accents, and not always the same way)."""
    return unquote(uri)


def path_to_uri(path: Path) -> str:
    return Path(path).absolute().as_uri()


def split_lines(text: str) -> list[str]:
    """Lines as LSP counts them: split on \\n, \\r\\n or \\r; a trailing newline opens one more (empty) line."""
    return re.split(r"\r\n|\r|\n", text)


def utf8_size_over(text: str, max_bytes: int) -> bool:
    """Whether `text` takes more than `max_bytes` bytes as UTF-8 (lone surrogates count 3, as stored); encodes
    only when the character count (1 to 4 bytes each) cannot decide."""
    if len(text) > max_bytes:
        return True
    return len(text) * 4 > max_bytes and len(text.encode("utf-8", "surrogatepass")) > max_bytes


def check_document(text: str, max_bytes: int) -> None:
    """Refuse documents the engine should not see: binary (NUL bytes) or larger than `max_bytes`."""
    if utf8_size_over(text, max_bytes):
        raise ConversionError("huge", f"document is larger than {max_bytes} bytes; repocomp skips it")
    if "\x00" in text:
        raise ConversionError("binary", "document looks binary (contains NUL bytes); repocomp skips it")


def to_cursor(text: str, position: types.Position, encoding: str, max_bytes: int) -> Cut:
    """The buffer `text` cut at an LSP position, or ConversionError (binary, huge, position).

    The cut's lines are the text's with line breaks normalized to \\n (the engine's view of the buffer), its column
    a str index.
    """
    check_document(text, max_bytes)
    lines = split_lines(text)
    if position.line < 0 or position.line >= len(lines) or position.character < 0:
        raise ConversionError(
            "position", f"position {position.line}:{position.character} is outside the document ({len(lines)} lines)"
        )
    col = client_col_to_index(lines[position.line], position.character, encoding)
    return Cut.from_lines(lines, position.line, col)


def _word_start(line: str, col: int) -> int:
    start = col
    while start > 0 and _WORD_CHAR.match(line[start - 1]):
        start -= 1
    return start


def to_inline_completion_list(completion: str, position: types.Position,
                              command: types.Command | None = None) -> types.InlineCompletionList:
    """The engine's completion (text to insert at the cursor) as an inline completion list (empty when none);
    `command` is what the editor runs when the item is accepted."""
    if not completion.strip():
        return types.InlineCompletionList(items=[])
    rng = types.Range(start=position, end=position)
    item = types.InlineCompletionItem(insert_text=completion, range=rng, command=command)
    return types.InlineCompletionList(items=[item])


def to_completion_list(
    completion: str, line_text: str, position: types.Position, encoding: str
) -> types.CompletionList:
    """One completion item carrying the (possibly multi-line) completion, for clients without inline completion.

    The item's text edit replaces the identifier prefix before the cursor (so the client's filtering, which
    matches `filter_text` against that prefix, keeps it) with that prefix plus the completion.
    """
    if not completion.strip():
        return types.CompletionList(is_incomplete=True, items=[])
    col = client_col_to_index(line_text, position.character, encoding)
    start = _word_start(line_text, col)
    prefix = line_text[start:col]
    new_text = prefix + completion
    first_line = new_text.split("\n", 1)[0]
    label = first_line.strip() or new_text.strip().split("\n", 1)[0].strip()
    rng = types.Range(
        start=types.Position(line=position.line, character=index_to_client_col(line_text, start, encoding)),
        end=types.Position(line=position.line, character=index_to_client_col(line_text, col, encoding)),
    )
    n_lines = new_text.count("\n") + 1
    item = types.CompletionItem(
        label=label[:80] if len(label) <= 80 else label[:79] + "…",
        kind=types.CompletionItemKind.Snippet if n_lines > 1 else types.CompletionItemKind.Text,
        detail=f"repocomp ({n_lines} line{'s' if n_lines != 1 else ''})",
        documentation=new_text,
        filter_text=first_line if first_line.strip() else prefix,
        sort_text="0",
        preselect=True,
        insert_text_format=types.InsertTextFormat.PlainText,
        text_edit=types.TextEdit(range=rng, new_text=new_text),
    )
    return types.CompletionList(is_incomplete=True, items=[item])
