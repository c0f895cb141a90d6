"""One completion request: what the caller asks (`CompletionOptions`, built once by each caller), the request
checked (`check_request`), what its rounds have produced so far and the time each stage took."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from repocomp.config.schema import MODES, Config
from repocomp.errors import RepocompError
from repocomp.prompt.cursor import Cut, Hole

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from contextlib import AbstractAsyncContextManager

    from repocomp.backends import Generation
    from repocomp.context.definitions import RankedDefinition
    from repocomp.context.retrieval_decision import RetrievalDecision
    from repocomp.memory.controller import MemoryDecision
    from repocomp.prompt.layout import DefinitionSource, Prompt
    from repocomp.results import RoundTrace


@dataclass(frozen=True)
class CompletionOptions:
    """What one request asks of the engine beside the buffer and its cursor; each caller builds it once."""

    mode: str = "repocoder"  # one of MODES
    oracle_text: str | None = None  # the ground-truth window, for mode "oracle"
    kind: str = "auto"  # the completion kind post-processing cuts to
    context_start_line: int = 0  # where the in-file context starts (a task's own rule)
    explain: bool = False  # the result carries each round's fragments, scores and relations
    # the result carries what the final prompt showed (`context`) and the ranked definitions; an editor needs neither
    trace: bool = False
    definitions: bool | None = None  # overrides `[definitions] enabled` for this request
    # each round's generation runs inside `generating()`: the language server hands its lock on the index back
    # there, so that updates need not wait for a model (a round reads all it needs from the index before)
    generating: Callable[[], AbstractAsyncContextManager[None]] | None = None
    cache_key: str | None = None  # the document whose consecutive prompts a backend may reuse the prefix of
    # time.monotonic() by which the answer is due, made once where the request enters (the language server: from
    # the editor's request and its configuration); None: `[backend] timeout_s` from when the request is checked.
    # The rounds, the backend and the fallback all read this one deadline; none adds a margin of its own.
    deadline: float | None = None
    # a prefetch: the first round's prompt is computed into the model's prefix cache and nothing is written; the
    # document's line context is kept (context/typed_line.py), so that a request here soon computes only the rest
    prefill: bool = False


DEFAULT_OPTIONS = CompletionOptions()


@dataclass(frozen=True)
class Request:
    """One completion request, checked: the hole and what this request asks for."""

    hole: Hole
    mode: str
    kind: str  # the completion kind postprocessing cuts to
    oracle_text: str | None
    rounds: int
    definitions: bool  # whether the prompt may carry the definitions the code before the cursor uses
    explain: bool
    trace: bool  # the result carries what the prompt showed and the ranked definitions
    timeout_s: float
    deadline: float  # time.monotonic() by which the whole completion must be answered
    cache_key: str | None = None  # the document whose prompts a backend may reuse the prefix of
    prefill: bool = False  # a prefetch (CompletionOptions.prefill)


@dataclass
class RoundsSoFar:
    """What the rounds have produced so far."""

    draft: str = ""
    prompt: Prompt | None = None
    ranked: list[RankedDefinition] = field(default_factory=list)
    def_sources: list[DefinitionSource] = field(default_factory=list)
    backend_name: str = "none"
    written: bool = False  # a model wrote the draft (not copied from retrieved code)
    fell_back: bool = False
    error: str = ""
    deadline_passed: bool = False  # the first round's model gave no answer in time (the fallback's, if any, stands)
    rounds: list[RoundTrace] = field(default_factory=list)
    memory: MemoryDecision | None = None
    retrieval: RetrievalDecision | None = None  # the last round's, with `[retrieval] selective`

    def take(self, answer: Generation) -> None:
        self.draft, self.backend_name, self.error = answer.text, answer.backend, answer.error
        self.written, self.fell_back = not answer.copied, answer.fell_back

    def note(self, message: str) -> None:
        self.error = join_notes(self.error, message)


class Timings(dict[str, float]):
    """Milliseconds per stage, timed with `with timings("stage"):`."""

    def __init__(self) -> None:
        super().__init__()
        self._started = time.perf_counter()

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        t = time.perf_counter()
        try:
            yield
        finally:
            self[name] = (time.perf_counter() - t) * 1e3

    def elapsed_ms(self) -> float:
        return (time.perf_counter() - self._started) * 1e3


def join_notes(error: str, note: str) -> str:
    return f"{error}; {note}" if error else note


def _normalize_path(path: str) -> str:
    p = PurePosixPath(path.replace("\\", "/"))
    if p.is_absolute() or ".." in p.parts or str(p) in ("", "."):
        raise RepocompError(f"path {path!r} must be relative to the repository root and inside it")
    return str(p)


def check_request(path: str, cut: Cut, options: CompletionOptions, config: Config) -> Request:
    """The request checked (a RepocompError says what is wrong)."""
    mode, oracle_text, context_start_line = options.mode, options.oracle_text, options.context_start_line
    if mode not in MODES:
        raise RepocompError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
    if mode == "oracle" and oracle_text is None:
        raise RepocompError("mode 'oracle' needs oracle_text (the ground-truth window)")
    if not 0 <= context_start_line <= cut.line:
        raise RepocompError(f"context_start_line {context_start_line} must be in 0..{cut.line}")
    rounds = {"infile": 1, "vanilla": 1, "oracle": 1, "repocoder": config.retrieval.iterations}[mode]
    definitions = config.definitions.enabled if options.definitions is None else options.definitions
    now = time.monotonic()
    deadline = options.deadline if options.deadline is not None else now + config.backend.timeout_s
    timeout_s = max(0.0, deadline - now)
    return Request(Hole(_normalize_path(path), cut, context_start_line), mode, options.kind, oracle_text, rounds,
                    definitions and mode != "infile", options.explain, options.trace or options.explain,
                    timeout_s, deadline, options.cache_key, options.prefill)
