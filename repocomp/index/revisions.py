"""Which files the index's updates changed, as far as a holder of what it read from the index needs to know.

The engine keeps a line's context while the user types in it (`repocomp.context.typed_line`); the index takes in
that buffer as it is typed (the language server syncs it when typing pauses), which must not end the context, while
a change to any other file (a save, a file changed on disk) must: what was retrieved may be stale. Counting every
update and the last run of updates that changed one file only answers that in constant time."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["Revisions"]


class Revisions:
    """The index's update count (`now`), and since which count only one file has changed."""

    def __init__(self) -> None:
        self.now = 0
        self._run_from = 0  # the count before the current run of updates that each changed `_run_path` only
        self._run_path: str | None = None

    def note(self, paths: Iterable[str]) -> None:
        """An update that changed `paths`."""
        changed = set(paths)
        only = next(iter(changed)) if len(changed) == 1 else None
        if only is None or only != self._run_path:
            self._run_from, self._run_path = self.now, only
        self.now += 1

    def changed_elsewhere_since(self, revision: int, path: str) -> bool:
        """Whether an update since count `revision` changed a file other than `path`."""
        return revision != self.now and not (self._run_path == path and self._run_from <= revision)
