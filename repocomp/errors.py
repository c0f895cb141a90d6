"""The exception types users can cause (bad path, bad position, unusable stored index, backend down).

Errors of dependencies met while reading a stored index (OSError, numpy/scipy, JSON, the index codec, the term
index) are translated into the `IndexUnusableError` kinds where they enter (`repocomp.index.store.read_state`,
`repocomp.index.persistence.load_index`), each with a one-line message naming the file; nothing raw leaves `Index.load`.
"""

from __future__ import annotations

from pathlib import Path


class RepocompError(Exception):
    """An error the user can act on; its message says what to do. The CLI prints it without a traceback."""


class ConfigError(RepocompError):
    """Invalid configuration: unknown keys or bad values, each named in the message."""


class IndexUnusableError(RepocompError):
    """The stored index cannot be used as it is; `Index.open` rebuilds it. Raised by `Index.load` only as one of:"""


class IndexMissingError(IndexUnusableError):
    """No index is stored yet (the first run): built without a word."""


class IndexStaleError(IndexUnusableError):
    """The stored index is of another format version (of the file, its schema or a part such as the term index) or
    was built with other structural settings: expected after an upgrade or a config change, rebuilt quietly."""


class IndexCorruptError(IndexUnusableError):
    """The stored index is damaged or unreadable (truncated, garbage, inconsistent tables): rebuilt with a warning."""


class IndexUntrustedError(IndexCorruptError):
    """The stored index is not the repository's own: a symlink, built for another root, or holding a path that
    leads outside the repository. `Index.open` sets the file aside (`path`, renamed, never followed) and rebuilds,
    with a warning."""

    def __init__(self, message: str, path: Path) -> None:
        super().__init__(message)
        self.path = path


class BackendError(RepocompError):
    """The LLM backend is down, slow or answered something unusable."""
