"""The index's plain records (no behaviour beyond a property): a file as indexed, and the summary of a build.

Kept apart from `Index` so that the codec reads and writes them without importing the index (no import cycle)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graph.parsing import ParsedFile

__all__ = ["FileEntry", "IndexSummary", "decoded"]


@dataclass(slots=True)  # one per file
class FileEntry:
    path: str
    language: str
    # the file's text, or its UTF-8 bytes (a view of the index file it was loaded from: decoded when read, so a
    # loaded index holds no copy of the repository's text)
    source: str | np.ndarray
    # its parse, or (a loaded file's) what makes it from the index file when read (`index.stored_parse`)
    parse: ParsedFile | Callable[[], ParsedFile]
    windows: np.ndarray  # int64: fragment id of each window, in file order (read in place from the index file)
    node_ids: np.ndarray  # global graph id of each local syntax node

    @property
    def parsed(self) -> ParsedFile:
        return self.parse if isinstance(self.parse, ParsedFile) else self.parse()

    @property
    def text(self) -> str:
        return self.source if isinstance(self.source, str) else decoded(self.source)

    @property
    def lines(self) -> list[str]:
        return self.text.split("\n")


def decoded(data: np.ndarray) -> str:
    """Stored UTF-8 bytes as text (editor buffers may hold lone surrogates: stored as they are)."""
    return data.tobytes().decode("utf-8", "surrogatepass")


@dataclass
class IndexSummary:
    files: int = 0
    fragments: int = 0
    nodes: int = 0
    edges: dict[str, int] = field(default_factory=dict)
    relation_nonzeros: int = 0
    phases_s: dict[str, float] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    index_bytes: int = 0
    parse_errors: int = 0
    warnings: list[str] = field(default_factory=list)  # what the build left out as a whole (limits reached)
    # files the build had still to add when this index was saved (an interrupted build, resumed by `Index.open`)
    pending_files: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}
