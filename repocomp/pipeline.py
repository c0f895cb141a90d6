"""The engine's one entry point: (file, buffer, cursor) -> completion, used by the CLI, the LSP server and eval.

Modes:
- "infile": no retrieval; the prompt is the in-file context only.
- "vanilla": one retrieve-then-generate round.
- "repocoder": `config.retrieval.iterations` rounds. Round 1 queries with the last `window` (20) lines before
  the cursor (never before `context_start_line`); round r+1 with the last `stride` (10) lines plus the first 10
  non-blank lines of round r's draft.
- "oracle": one round queried with the ground-truth window (`oracle_text`), as RepoCoder's upper bound.

One deadline bounds the whole completion, all rounds together (`CompletionOptions.deadline`, made where the
request enters; `[backend] timeout_s` from now without one): each round's generation is cancelled at it and a
round that would start after it is skipped, so the previous round's draft is the answer; a first round cut
short is answered by the backend's fallback (`[backend] fallback`, at once) or empty, and `CompletionResult.error`
says why.

First-round blocks (vanilla/repocoder) show the `stride` lines that follow the matched window, as RepoCoder
does: with a query made only of code before the hole, the code after a matching window is what the hole most
likely continues with. Later rounds (and oracle) query with text that already covers the hole, so the matched
window itself is shown.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from repocomp.backends import FallbackBackend, Generation, GenerationRequest
from repocomp.backends.base import PrefillingBackend, loop_deadline
from repocomp.backends.model_defaults import is_resolved
from repocomp.backends.profile import format_stops
from repocomp.config.schema import MODES, Config
from repocomp.context.definitions import DefinitionFinder
from repocomp.context.paging import paged_definitions
from repocomp.context.render import DefinitionRenderer
from repocomp.context.retrieval import Hit, Retriever, round_query, session_relation
from repocomp.context.retrieval_decision import RetrievalDecision, decide
from repocomp.context.typed_line import LineContext, LineContexts, RoundContext
from repocomp.prompt.block_order import BlockOrders
from repocomp.prompt.cursor import Cut
from repocomp.prompt.layout import (
    BlockSource,
    DefinitionSource,
    DefinitionsSection,
    Layout,
    Place,
    Prompt,
    RecentSection,
    RecentSource,
    TokenCounter,
    build_prompt,
    make_token_counter,
)
from repocomp.prompt.postprocess import drop_cut_word, is_finished, postprocess
from repocomp.prompt.trailing_space import drop_space, split_trailing_space
from repocomp.request import (
    DEFAULT_OPTIONS,
    CompletionOptions,
    Request,
    RoundsSoFar,
    Timings,
    check_request,
)
from repocomp.results import (
    CompletionResult,
    ContextBlock,
    DefinitionTrace,
    RoundTrace,
    definition_traces,
    shown_context,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from contextlib import AbstractAsyncContextManager

    from repocomp.backends import Backend
    from repocomp.context.definitions import BufferState, RankedDefinition
    from repocomp.index import Index
    from repocomp.memory.controller import MemoryDecision
    from repocomp.memory.session import SessionMemory

__all__ = ["CompletionOptions", "CompletionResult", "Completer", "ContextBlock", "DefinitionTrace", "RoundTrace",
           "MODES"]

log = logging.getLogger(__name__)

_CAP_SLACK = 4  # tokens: a draft this close to max_new_tokens was stopped by the cap
_IN_VIEW_LINES = 100  # the memory skips hunks already in view: at most the in-file context's lines
_MEMO_CHARS = 400  # token counts of texts up to this long are memoized (a line; not a whole context)


class Completer:
    """Completes code at a cursor with an index (or none) and a backend (or none: retrieval only, text "")."""

    def __init__(self, index: Index | None, config: Config, backend: Backend | None = None, *,
                 sync_buffers: bool = True, memory: SessionMemory | None = None) -> None:
        """`sync_buffers`: put the live buffer into the index before each completion (exact: what the CLI and the
        evaluation need); False when the caller keeps the index current itself (the language server does it
        when typing pauses, so a request never waits for a re-index). `memory`: the editing session of the
        folder (recent edits, thoughts), consulted when `[memory] enabled` and its controller finds it related."""
        if not is_resolved(config):
            raise ValueError("Completer takes a resolved config: repocomp.backends.model_defaults.resolve_config first")
        self.index = index
        self.sync_buffers = sync_buffers
        self.memory = memory
        self.config = config
        self.backend = backend
        # answers a first round the deadline cut short, at once (it copies from the prompt's candidates)
        self._late = backend.fallback if isinstance(backend, FallbackBackend) else None
        self.retriever = Retriever(index, self.config) if index is not None else None
        self._count: TokenCounter | None = None
        self._finder: DefinitionFinder | None = None
        self._renderer = DefinitionRenderer(index, config.definitions) if index is not None else None
        self._orders = BlockOrders()  # (cache_key, round) -> the last prompt's block order
        self._typed_lines = LineContexts(config.retrieval.keep_lines)  # cache_key -> its last request's context, by round
        prompt = self.config.prompt  # a model that reads Qwen2.5-Coder's format ends its answer with one of its tokens
        self._stops = format_stops(prompt.fim, prompt.layout)

    @property
    def finder(self) -> DefinitionFinder | None:
        """Definition candidates need the real index (resolver, graph); None for stand-ins."""
        if self._finder is None and self.index is not None and DefinitionFinder.supports(self.index):
            rel = self.config.relations
            self._finder = DefinitionFinder(self.index, self.config.definitions, self.config.fragments.window,
                                            rel.cutoff, rel.max_reach)
        return self._finder

    @property
    def count_tokens(self) -> TokenCounter:
        if self._count is None:  # loading a real tokenizer takes a moment: only when first needed
            raw = make_token_counter(self.config.prompt)
            # Lines recur across blocks, rounds and requests: memoize their counts. Not long texts (the in-file
            # context, new at every keystroke): those would fill the cache with kilobytes each for nothing.
            cached = functools.lru_cache(maxsize=1 << 15)(raw)
            self._count = lambda text: cached(text) if len(text) <= _MEMO_CHARS else raw(text)
        return self._count

    # -- helpers --------------------------------------------------------------------------------------------

    def _sync_buffer(self, path: str, text: str) -> None:
        """Make the index hold the live buffer for `path` (incremental; the query and leak rule use it)."""
        assert self.index is not None
        held = self.index.file_lines(path)
        # Compare texts, not line lists: indexers split lines differently around a final newline.
        if held is None or "\n".join(held).rstrip("\n") != text.rstrip("\n"):
            self.index.update_file(path, text=text)

    def _block(self, hit: Hit, shift: int, hole_path: str, prompt_start: int,
               file_cache: dict[str, list[str] | None]) -> ContextBlock:
        """The lines shown for a hit; first-round blocks move `shift` lines down to show what follows."""
        assert self.index is not None
        loc = hit.location
        start, end = loc.start_line, loc.end_line
        text = None
        if shift > 0 and (loc.path != hole_path or end + shift <= max(prompt_start, end)):
            # the lines shown are most often the next window: its fragment holds them
            text = self.index.window_text(loc.path, start + shift, end + shift)
            if text is not None:
                start, end = start + shift, end + shift
        if shift > 0 and text is None:
            if loc.path not in file_cache:  # file_lines may split the whole file: once per file per request
                file_cache[loc.path] = self.index.file_lines(loc.path)
            lines = file_cache[loc.path]
            if lines is not None:
                limit = len(lines)
                if loc.path == hole_path:
                    limit = min(limit, max(prompt_start, end))  # never show the hole's file past the prompt start
                new_end = min(end + shift, limit)
                new_start = max(0, new_end - (end - start))
                start, end = new_start, new_end
                text = "\n".join(lines[start:end])
        if text is None:
            frag = self.index.fragments[hit.fragment_id]
            text = frag.text if frag is not None else ""
        return ContextBlock(hit.fragment_id, loc.path, start, end, hit.s_ind, hit.s_env, hit.s_rel, text)

    def _explain(self, blocks: list[ContextBlock], anchor: int | None) -> None:
        assert self.index is not None
        for b in blocks:
            target = anchor if anchor is not None else (blocks[0].fragment_id if blocks else None)
            if target is None or target == b.fragment_id:
                continue
            try:
                b.relations = list(self.index.relation_edge_types(b.fragment_id, target))
            except Exception:  # explanation is best-effort; never fail a completion over it
                log.debug("relation_edge_types(%d, %d) failed", b.fragment_id, target, exc_info=True)

    # -- entry points ---------------------------------------------------------------------------------------

    def complete(self, path: str, text: str, line: int, col: int,
                 options: CompletionOptions = DEFAULT_OPTIONS) -> CompletionResult:
        """Synchronous `acomplete` (for callers without an event loop)."""
        return asyncio.run(self.acomplete(path, text, line, col, options))

    async def acomplete(self, path: str, text: str, line: int, col: int,
                        options: CompletionOptions = DEFAULT_OPTIONS) -> CompletionResult:
        """Complete `text` (the live buffer of `path`, relative to the index root) at 0-based (line, col)."""
        return await self.acomplete_at(path, Cut.of(text, line, col, path), options)

    async def acomplete_at(self, path: str, cut: Cut, options: CompletionOptions = DEFAULT_OPTIONS) -> CompletionResult:
        """Complete the buffer `cut` at its cursor (`path` relative to the index root), as `options` ask.

        The stages: check the request; put the live buffer into the index; scan
        the code before the cursor for the names it uses; then per round retrieve similar code, rank
        definitions, lay out the prompt and generate; post-process the last draft."""
        req = check_request(path, cut, options, self.config)
        generating = options.generating
        timings = Timings()
        run = RoundsSoFar()
        with timings("sync"):
            if self.index is not None and req.mode != "infile" and self.sync_buffers:
                self._sync_buffer(req.hole.path, cut.text)
        # while the user types on in a line, its first request's context stands, every round's (context/typed_line.py)
        keeper = self.index if req.mode in ("vanilla", "repocoder") else None
        kept = self._typed_lines.get(req.cache_key, req.hole, keeper) if keeper is not None else None
        if kept is not None:
            state, run.memory = kept.state, kept.memory
        else:
            state = self._scan_definitions(req, timings)
            with timings("memory"):
                run.memory = self._recall(req)
        anchor = None
        if req.explain and self.retriever is not None:
            anchor = self.retriever.covering(req.hole.path, max(0, cut.line - 1) if cut.col == 0 else cut.line)
        # the rounds before the last one kept only drafted its query: they are not run again
        first = min(len(kept.rounds), req.rounds) if kept is not None else 1
        for r in range(first, req.rounds + 1):
            if r > first and time.monotonic() >= req.deadline:
                run.note(f"stopped after round {r - 1} of {req.rounds}: the completion's {req.timeout_s:.3g}s "
                         "deadline passed")
                break
            layout = None
            if kept is not None and r <= len(kept.rounds):
                rc = kept.rounds[r - 1]
                query, blocks, shown, layout = rc.query, rc.blocks, rc.block_sources, rc.layout
                run.retrieval, run.ranked, run.def_sources = rc.retrieval, rc.ranked, rc.def_sources
            else:
                query, blocks, state = self._context(req, r, run, state, timings)
                shown = self._block_sources(blocks)
            with timings(f"prompt_{r}"):
                round_prompt = self._keep_order(req, r, self._prompt(req, shown, run.def_sources, run.memory,
                                                                     layout=layout))
            if keeper is not None and (kept is None or r > len(kept.rounds)):
                made = RoundContext(query, blocks, shown, round_prompt.layout, run.retrieval, run.ranked,
                                    run.def_sources)
                kept = self._typed_lines.put(req.cache_key, req.hole, keeper, LineContext((made,), state, run.memory)) \
                    if kept is None else self._typed_lines.extend(req.cache_key, req.hole, kept, made)
            if req.explain:
                self._explain(blocks, anchor)
            with timings(f"generate_{r}"):
                answer = await self._generate_round(req, r, round_prompt, blocks, generating, run)
            if answer is None:  # the deadline passed in a later round: the previous round's draft stands
                break
            run.take(answer)
            run.prompt = round_prompt
            run.rounds.append(RoundTrace(query, run.draft, blocks, at_time_limit=answer.at_time_limit))
        if (self.config.retrieval.paging and req.mode != "infile" and run.rounds and run.draft
                and time.monotonic() < req.deadline):
            await self._page(req, run, state, generating, timings)
        return self._result(req, run, timings)

    # -- stages ---------------------------------------------------------------------------------------------

    def _context(self, req: Request, r: int, run: RoundsSoFar, state: BufferState | None, timings: Timings,
                 ) -> tuple[str, list[ContextBlock], BufferState | None]:
        """Round r's query, the similar code its prompt shows and the definitions (into `run`), and the
        definitions' buffer state."""
        query, blocks = self._retrieve(req, r, run.draft, timings)
        if self.config.retrieval.selective and blocks:
            with timings(f"decide_{r}"):
                run.retrieval = self._decide(req, query, blocks)
            if not run.retrieval.retrieve:
                blocks = []
        if state is not None:
            with timings(f"definitions_{r}"):
                state, run.ranked, run.def_sources = self._rank_definitions(req, state, blocks)
        return query, blocks, state

    def _scan_definitions(self, req: Request, timings: Timings) -> BufferState | None:
        """The names the code before the cursor uses (None when definitions are off or cannot be found)."""
        if not req.definitions or self.finder is None:
            return None
        hole = req.hole
        with timings("definitions_scan"):
            return self.finder.buffer_state(hole.path, hole.lines, hole.line, hole.col)

    def _retrieve(self, req: Request, r: int, draft: str, timings: Timings) -> tuple[str, list[ContextBlock]]:
        """Round r's query and the similar code it retrieves (RepoCoder's rule for the query)."""
        if req.mode == "infile" or self.retriever is None:
            return "", []
        hole, fc = req.hole, self.config.fragments
        query = req.oracle_text or "" if req.mode == "oracle" else \
            round_query(r, hole.before, hole.partial, draft, fc.window, fc.stride)
        rc = self.config.retrieval
        with timings(f"retrieve_{r}"):
            res = self.retriever.retrieve(query, path=hole.path, prompt_start_line=hole.context_start_line,
                                          cursor_line=hole.line, alpha=rc.alpha, query_relations=rc.query_relations)
            shift = fc.stride if (r == 1 and req.mode in ("vanilla", "repocoder")) else 0
            file_cache: dict[str, list[str] | None] = {}
            blocks = [self._block(h, shift, hole.path, hole.context_start_line, file_cache) for h in res.hits]
        timings.update({f"{k}_{r}": v for k, v in res.timings_ms.items()})
        return query, blocks

    def _decide(self, req: Request, query: str, blocks: list[ContextBlock]) -> RetrievalDecision:
        """Whether the prompt shows the retrieved code: not when the file in view above the query holds code as
        similar to it (context/retrieval_decision.py)."""
        assert self.index is not None
        window = self.config.fragments.window
        before = req.hole.before
        above = before[max(0, len(before) - _IN_VIEW_LINES):max(0, len(before) - window)]
        texts = [f.text for f in (self.index.fragments[b.fragment_id] for b in blocks) if f is not None]
        return decide(query, above, texts, window)

    def _rank_definitions(self, req: Request, state: BufferState, blocks: list[ContextBlock],
                          ) -> tuple[BufferState, list[RankedDefinition], list[DefinitionSource]]:
        """The definitions the prompt may show, ranked with this round's blocks; the scan redone if the index
        changed since."""
        assert self.finder is not None
        hole = req.hole
        state = self._current(req, state)
        assert self._renderer is not None  # with the finder: a real index
        ranked = self.finder.rank(state, [(b.path, b.start_line, b.end_line) for b in blocks])
        return state, ranked, self._renderer.sources(ranked, hole.path, hole.line)

    def _block_sources(self, blocks: list[ContextBlock]) -> list[BlockSource]:
        """What the prompt shows of each block: its lines and every path they occur at, as the index has them now."""
        return [self._source(b, self.index.fragments[b.fragment_id] if self.index else None) for b in blocks]

    def _prompt(self, req: Request, sources: list[BlockSource], def_sources: list[DefinitionSource],
                memory: MemoryDecision | None, max_definitions: int | None = None,
                layout: Layout | None = None) -> Prompt:
        hole = req.hole
        recent = RecentSection()
        if memory is not None and memory.consulted and memory.entries:
            recent = RecentSection([RecentSource(e.kind, e.path, e.start_line, tuple(e.lines)) for e in memory.entries],
                                   memory.budget_tokens)
        return build_prompt(sources, hole.prefix, hole.suffix, self.config.prompt, self.count_tokens,
                            place=Place(hole.path, hole.line, self.index.root.name if self.index is not None else ""),
                            definitions=DefinitionsSection.of(def_sources, self.config.definitions, max_definitions),
                            recent=recent, layout=layout)

    def _keep_order(self, req: Request, r: int, prompt: Prompt) -> Prompt:
        """The prompt in the block order that shares the longest prefix with its document's previous one
        (`repocomp.prompt.block_order`); requests without a key (the CLI, evaluation) keep RepoCoder's order."""
        return prompt if req.cache_key is None else self._orders.keep((req.cache_key, r), req.hole.line, prompt)

    async def _page(self, req: Request, run: RoundsSoFar, state: BufferState | None,
                    generating: Callable[[], AbstractAsyncContextManager[None]] | None,
                    timings: Timings) -> None:
        """MemGPT's model-directed paging: the repository names the last draft uses that its prompt does not
        define are paged in from the archive (the index: their definitions) for one more round on the last round's
        blocks, whose draft becomes the answer; a draft using no such name costs nothing more."""
        assert run.prompt is not None
        with timings("paging_lookup"):
            paged = self._paged_definitions(req, run, state)
        if not paged:
            return
        r = req.rounds + 1
        names = tuple(src.name for src in paged)
        shown = {(src.path, src.name) for src in paged}
        sources = paged + [src for src in run.def_sources if (src.path, src.name) not in shown]
        blocks = run.rounds[-1].blocks
        with timings(f"prompt_{r}"):
            dc = self.config.definitions
            prompt = self._keep_order(req, r, self._prompt(req, self._block_sources(blocks), sources, run.memory,
                                                           max(dc.max_definitions, len(paged))))
        if not any((m.path, m.name) in shown for d in prompt.definitions for m in d.members):
            return  # no room for any of them: the draft stands
        with timings(f"generate_{r}"):
            answer = await self._generate_round(req, r, prompt, blocks, generating, run)
        if answer is None:
            return
        run.take(answer)
        run.prompt, run.def_sources = prompt, sources
        run.rounds.append(RoundTrace("", run.draft, blocks, at_time_limit=answer.at_time_limit, paged=names))

    def _paged_definitions(self, req: Request, run: RoundsSoFar, state: BufferState | None) -> list[DefinitionSource]:
        if self.finder is None or self._renderer is None or run.prompt is None:
            return []
        hole = req.hole
        ranked = paged_definitions(self._current(req, state), hole.partial, run.draft, run.prompt.text, hole.line,
                                   self.config.retrieval.paging_max)
        return self._renderer.sources(ranked, hole.path, hole.line)  # at most one per ranked name

    def _current(self, req: Request, state: BufferState | None) -> BufferState:
        """The scan of the code before the cursor, redone when the index changed since (or never made)."""
        assert self.finder is not None
        hole = req.hole
        if state is None or not self.finder.is_current(state):
            state = self.finder.buffer_state(hole.path, hole.lines, hole.line, hole.col)
        return state

    def _recall(self, req: Request) -> MemoryDecision | None:
        """The session memory's controller (SCM) for this cursor: whether the session is consulted, what it shows
        and within how many tokens; None without a memory or with `[memory] enabled = false`."""
        if self.memory is None or not self.config.memory.enabled or req.mode == "infile":
            return None
        mc = self.config.memory
        hole, pc = req.hole, self.config.prompt
        budget = int(mc.share * max(0, pc.max_tokens - pc.context_tokens))
        in_view = hole.query_lines[-_IN_VIEW_LINES:]
        relation = session_relation(self.index, self.retriever, hole, self.config.fragments.window) \
            if mc.relations and self.index is not None and self.retriever is not None else None
        return self.memory.select(hole.path, hole.line, in_view, budget, self.count_tokens, relation)

    async def _generate_round(self, req: Request, r: int, prompt: Prompt, blocks: list[ContextBlock],
                              generating: Callable[[], AbstractAsyncContextManager[None]] | None,
                              run: RoundsSoFar) -> Generation | None:
        """Round r's draft; None when the deadline passed in a later round (the previous draft stands)."""
        request, space = self._generation_request(prompt, req.hole.prefix, req.hole.suffix, blocks, req.kind,
                                                  req.deadline, req.cache_key, req.hole.language)
        if req.prefill:
            await self._prefill(request, generating)
            return Generation("", getattr(self.backend, "name", "none"))
        try:
            async with generating() if generating is not None else contextlib.nullcontext():
                return await self._generate(request, space)
        except TimeoutError:
            late = f"round {r} of {req.rounds} got no answer within the completion's {req.timeout_s:.3g}s deadline"
            if r > 1:  # a draft the model wrote beats the fallback's copy
                run.note(f"{late}; round {r - 1}'s draft kept")
                return None
            run.deadline_passed = True
            if self._late is None:
                return Generation("", getattr(self.backend, "name", "none"), late)
            gen = await self._late.agenerate(request)  # copies from the prompt's candidates: no wait
            return replace(gen, error=f"{late}; {gen.backend} answered", fell_back=True)

    def _result(self, req: Request, run: RoundsSoFar, timings: Timings) -> CompletionResult:
        """The last draft post-processed for the completion kind, with what the final prompt showed."""
        prompt, hole = run.prompt, req.hole
        assert prompt is not None
        final, last = run.draft, run.rounds[-1]
        if self.backend is not None and final:
            final = postprocess(final, req.kind, hole.prefix, hole.suffix, hole.language)
            if self._at_a_limit(run, last) and not is_finished(run.draft, req.kind, hole.prefix, hole.language):
                final = drop_cut_word(final)  # the limit may have cut an identifier in half
        context = shown_context(prompt, last.blocks) if req.trace else []
        traces = definition_traces(run.ranked, run.def_sources, prompt) if req.trace else []
        timings["total"] = timings.elapsed_ms()
        return CompletionResult(text=final, backend=run.backend_name, context=context, prompt=prompt.text,
                                prompt_tokens=prompt.tokens, rounds=run.rounds, timings_ms=dict(timings),
                                error=run.error, fell_back=run.fell_back, definitions=traces,
                                cut_by_time=last.at_time_limit or run.deadline_passed, memory=run.memory,
                                retrieval=run.retrieval)

    def _at_a_limit(self, run: RoundsSoFar, last: RoundTrace) -> bool:
        """Whether the last draft was stopped by the time limit or the token cap (a model's tokens, counted again
        with its tokenizer: a few tokens of slack for merges when the text is tokenized anew); the extractive
        backend cuts at whole tokens itself."""
        if last.at_time_limit:
            return True
        cap = self.config.backend.max_new_tokens
        return run.written and self.count_tokens(run.draft) >= cap - _CAP_SLACK

    # -- definitions ----------------------------------------------------------------------------------------

    def _source(self, block: ContextBlock, fragment: object) -> BlockSource:
        locs = getattr(fragment, "locations", None) or []
        # The path shown first is the one whose lines are shown; other places the same window occurs follow.
        others = sorted({loc.path for loc in locs} - {block.path})
        return BlockSource(block.fragment_id, (block.path, *others), block.start_line, block.end_line, block.text)

    def _generation_request(self, prompt: Prompt, prefix: str, suffix: str, blocks: list[ContextBlock], kind: str,
                            deadline: float, cache_key: str | None, language: str) -> tuple[GenerationRequest, str]:
        """The round's request to the backend, and the prompt's trailing space held back from it (the answer
        gets it back: `_generate`)."""
        bc = self.config.backend
        text, space = split_trailing_space(prompt.text) if prompt.fim == "none" else (prompt.text, "")
        # Every round stops where postprocessing would cut: a later round's query uses the draft's first lines,
        # and tokens past the cut cost a model on 2 cores about 40 ms each for nothing the user sees.
        # The model-free backend copies from candidates: the session's edits shown in the prompt come first (what
        # the developer just wrote, judged related by the memory's controller), then similar code.
        recent = tuple("\n".join(r.lines) for r in reversed(prompt.recent) if r.kind in ("hunk", "replaced"))
        request = GenerationRequest(
            prompt=text, prefix=prefix, suffix=suffix, candidates=recent + tuple(b.text for b in blocks),
            max_new_tokens=bc.max_new_tokens, temperature=bc.temperature, stop=self._stops,
            finished=lambda t: is_finished(drop_space(t, space), kind, prefix, language), deadline=deadline,
            max_time_s=bc.max_time_s or None, cache_key=cache_key, language=language)
        return request, space

    async def _generate(self, request: GenerationRequest, space: str) -> Generation:
        """The backend's answer by the request's deadline (TimeoutError past it: the backend is cancelled)."""
        if self.backend is None:
            return Generation("", "none")
        assert request.deadline is not None
        async with asyncio.timeout_at(loop_deadline(request.deadline)):
            gen = await self.backend.agenerate(request)
        if not gen.copied:  # the extractive backend works on `prefix` itself
            return replace(gen, text=drop_space(gen.text, space))
        return gen

    async def _prefill(self, request: GenerationRequest,
                       generating: Callable[[], AbstractAsyncContextManager[None]] | None) -> None:
        """A prefetch's prompt into the model's prefix cache, by the request's deadline; nothing where the backend
        keeps no cache."""
        if not isinstance(self.backend, PrefillingBackend):
            return
        assert request.deadline is not None
        with contextlib.suppress(TimeoutError):
            async with generating() if generating is not None else contextlib.nullcontext():
                async with asyncio.timeout_at(loop_deadline(request.deadline)):
                    await self.backend.aprefill(request)

    async def aclose(self) -> None:
        if self.backend is not None:
            await self.backend.aclose()
