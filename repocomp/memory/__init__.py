"""Memory of the editing session (MemGPT's tiers, SCM's controller, TiM's thoughts, FragRel's relations).

Plain events in (`TextEdit`, opened/closed files, shown and accepted completions), per-request decisions out
(`SessionMemory.select` -> `MemoryDecision`). Nothing here knows LSP.
"""

from repocomp.memory.controller import MemoryDecision, MemoryEntry
from repocomp.memory.events import TextEdit
from repocomp.memory.hunks import Hunk, HunkTracker
from repocomp.memory.session import SessionMemory
from repocomp.memory.store import RecallStore
from repocomp.memory.thoughts import Thought, think

__all__ = [
           "Hunk",
           "HunkTracker",
           "MemoryDecision",
           "MemoryEntry",
           "RecallStore",
           "SessionMemory",
           "TextEdit",
           "Thought",
           "think",
]
