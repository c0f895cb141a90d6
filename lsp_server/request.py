"""A completion request resolved once from the LSP request; every later step reads it, none works it out again.

`CompletionRequest.build` turns an LSP (uri, position) over the open document's text into engine terms: the
document's key, its file, its workspace folder and the path there, and the buffer cut at the cursor
(`repocomp.prompt.cursor.Cut`: line breaks normalized to \\n, the column in str indices). The generations
(`lsp_server.generations`), the engines (`lsp_server.engines`) and the session memory all read that one object.

`DocumentRef` is the same naming for notifications (didOpen, didChange, ...): a URI's key and file, once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lsprotocol import types

from lsp_server import convert
from lsp_server.folder_index import FolderIndex
from repocomp.prompt.cursor import Cut

if TYPE_CHECKING:
    from lsp_server.workspace_index import WorkspaceIndexes


@dataclass(frozen=True)
class DocumentRef:
    """A document as the server names it: its URI, its key among the open documents, its file (None when the URI
    is not a local file's)."""

    uri: str
    key: str  # convert.document_key(uri): editors percent-encode the same URI differently
    path: Path | None

    @classmethod
    def of(cls, uri: str) -> DocumentRef:
        return cls(uri, convert.document_key(uri), file_of(uri))


def file_of(uri: str) -> Path | None:
    """The local file a URI names; None for any other scheme."""
    try:
        return convert.uri_to_path(uri)
    except convert.ConversionError:
        return None


def locate(path: Path | None, indexes: WorkspaceIndexes | None) -> tuple[FolderIndex | None, str | None]:
    """The innermost workspace folder holding `path` and the path relative to its root; (None, None) outside."""
    folder = indexes.folder_for(path) if indexes is not None and path is not None else None
    rel = folder.relative(path) if folder is not None and path is not None else None
    return (folder, rel) if rel is not None else (None, None)


@dataclass(frozen=True)
class CompletionRequest:
    """Where to complete, in engine terms (see the module docstring)."""

    uri: str
    key: str  # the document's key (convert.document_key)
    path: Path  # the document's file, absolute
    folder: FolderIndex | None  # the innermost workspace folder holding it
    rel: str | None  # `path` relative to `folder.root` (POSIX); None exactly when `folder` is None
    cut: Cut  # the buffer cut at the cursor
    version: int | None  # the document's version the buffer is of
    index_stamp: int | None  # the folder's index version as of the request (None outside every folder)
    index_ready: bool  # the folder's index was ready (False outside every folder: an in-file completion)

    @classmethod
    def build(cls, uri: str, text: str, version: int | None, position: types.Position, encoding: str,
              max_bytes: int, indexes: WorkspaceIndexes | None) -> CompletionRequest:
        """The request at `position` of the open document `uri` whose buffer is `text`; a ConversionError (its kind:
        scheme, huge, binary, position) when there is nothing to complete."""
        path = convert.uri_to_path(uri)
        cut = convert.to_cursor(text, position, encoding, max_bytes)
        folder, rel = locate(path, indexes)
        stamp, ready = (folder.version, folder.ready) if folder is not None else (None, False)
        return cls(uri, convert.document_key(uri), path, folder, rel, cut, version, stamp, ready)

    @property
    def root(self) -> Path | None:
        """The folder's root: the key of its configuration and engines (None outside every folder)."""
        return self.folder.root if self.folder is not None else None

    def engine_path(self, repository_wide: bool) -> str:
        """The path the engine completes at: relative to the folder's root when completing repository-wide, the
        file's name in-file."""
        return self.rel if repository_wide and self.rel is not None else self.path.name

    @property
    def cache_key(self) -> str:
        """Names the folder and the document: consecutive prompts of one document share most of their text, and
        a backend may reuse their computed prefix."""
        return f"{self.root if self.root is not None else ''}\0{self.key}"
