"""The settings' schema: every section a frozen dataclass, validated on construction, with the fixed sets of names
the CLI's choices and the language server's options read; settings whose product is the cost are validated together
(window / stride, max_reach x top_k, cutoff with max_reach = 0 or with context_weight), each rule naming its number."""

from __future__ import annotations

import dataclasses
import ipaddress
import math
import os
from dataclasses import dataclass, field
from typing import Any, ClassVar
from urllib.parse import urlsplit

from repocomp.backends.registry import BACKENDS
from repocomp.config.coerce import build_section, shown

# The fixed sets of names, each spelled once: validation, CLI choices and LSP options read these.
MODES = ("infile", "vanilla", "repocoder", "oracle")  # completion modes; oracle (ground truth as query) is eval-only
BACKEND_NAMES = ("auto", *BACKENDS)
EVAL_BACKENDS = ("none",) + tuple(n for n in BACKEND_NAMES if n != "auto")  # none: retrieval only
FIM_FORMATS = ("none", "codellama", "starcoder", "qwen")
FIM_AT = ("inline", "continues", "always")  # where a FIM prompt reads the code after the cursor (repocomp.prompt.suffix)
PROMPT_LAYOUTS = ("comments", "files")  # RepoCoder's commented blocks; Qwen2.5-Coder's repository files
SIMILARITIES = ("jaccard", "bm25")


_DAY_S = 86_400.0  # the longest any timeout may be
MAX_CONFIG_BYTES = 1 << 20  # a config file larger than this is not read (a repository's is ignored, with a warning)
# dots on one line: tomllib's time is quadratic in a dotted key's depth (`a.a.a...`: 10,000 deep took 2.3 s,
# 100,000 minutes); with at most this many per line a 1 MiB file parses in seconds at worst
MAX_DOTS_PER_LINE = 256
# Joint bounds: settings whose product is the cost are bounded together (each rule names its number).
MAX_FRAGMENTS_PER_LINE = 16  # window / stride: how many fragments hold (and store a copy of) each line
MAX_REACH_X_TOP_K = 1 << 22  # max_reach x top_k: nodes kept per source times relations kept per fragment
MIN_UNBOUNDED_CUTOFF = 0.1  # max_reach = 0 (no bound) leaves the cutoff alone to bound reach: only this high
MAX_CONTEXT_REACH = 1024  # Eq. 7: windows either side a window relates to, log(cutoff) / log(context_weight)
MAX_REPOSITORY_EXCLUDES = 1000  # [index] exclude patterns a repository's own file may list


def check_setting(cond: bool, msg: str) -> None:
    """One rule of a settings section's `validate()`: a ValueError with `msg` unless `cond` holds."""
    if not cond:
        raise ValueError(msg)


# Peak memory of an index build per character of source it indexes (files, syntax, graph, relations, term index,
# the interpreter), rounded up from what `repocomp bench index` prints as "peak per character" on the monorepo
# `repocomp bench monorepo` assembles (docs/performance.md); that bench says when a build exceeds it
INDEX_BYTES_PER_SOURCE_CHAR = 8


@dataclass(frozen=True)
class IndexConfig:
    dir: str = ".repocomp"  # relative to the repository root, or absolute
    max_file_bytes: int = 1_000_000
    exclude: tuple[str, ...] = ()  # extra gitignore-style patterns
    languages: tuple[str, ...] = ("python", "java", "javascript", "typescript", "tsx", "go", "rust", "c", "cpp")
    # per indexed folder (far above a big real repository): past either, the rest of the folder is left out, said
    # in the summary (a folder such as `/` is indexed partially, never without bound); the walk also stops after
    # looking at 20 entries per allowed file (repocomp.index.walk)
    max_files: int = 100_000
    max_total_bytes: int = 1 << 30  # source text indexed, all files together
    # what building the index may take in memory, at most: held by the source text it admits (`text_budget`)
    max_memory_mb: int = 4096
    # the file system's root or the user's home with no repository marker in it (an editor opened there) is not
    # indexed unless this is set; it is then indexed within the limits above
    allow_broad_root: bool = False
    # source text per build batch: a larger folder is indexed batch by batch (directories in walk order), each
    # added as an update and saved, so that an interrupted build resumes and the language server answers from the
    # part already indexed
    batch_bytes: int = 64 << 20
    # cores a build (or a batch) uses: threads that compute relation rows at once (a block of rows each; the kernels
    # run outside the interpreter's lock) and processes that parse its files; 0 = one per core this process may
    # use, at most 8
    threads: int = 0

    def validate(self) -> None:
        check_setting(0 <= self.threads <= 64, "threads must be in 0..64")
        check_setting(0 < self.max_file_bytes <= 1 << 30, "max_file_bytes must be in 1..1073741824 (1 GiB)")
        check_setting(1 <= self.batch_bytes <= 1 << 36, "batch_bytes must be in 1..68719476736 (64 GiB)")
        check_setting(0 < self.max_files <= 10_000_000, "max_files must be in 1..10000000")
        check_setting(0 < self.max_total_bytes <= 1 << 36, "max_total_bytes must be in 1..68719476736 (64 GiB)")
        check_setting(1 <= self.max_memory_mb <= 1 << 20, "max_memory_mb must be in 1..1048576 (1 TiB)")

    def build_cores(self) -> int:
        if self.threads:
            return self.threads
        try:
            cores = len(os.sched_getaffinity(0))  # a container's or `taskset`'s share, not the machine's
        except AttributeError:  # no affinity call here (macOS, Windows)
            cores = os.cpu_count() or 1
        return max(1, min(8, cores))

    def text_budget(self) -> tuple[int, str]:
        """The source text a folder may index, in characters, and the setting that bounds it."""
        by_memory = (self.max_memory_mb << 20) // INDEX_BYTES_PER_SOURCE_CHAR
        if by_memory < self.max_total_bytes:
            return by_memory, f"max_memory_mb {self.max_memory_mb:,}"
        return self.max_total_bytes, f"max_total_bytes {self.max_total_bytes:,}"


@dataclass(frozen=True)
class FragmentConfig:
    window: int = 20  # lines per fragment (RepoCoder)
    stride: int = 10  # a new fragment every `stride` lines

    def validate(self) -> None:
        check_setting(0 < self.window <= 10_000, "window must be in 1..10000")
        check_setting(0 < self.stride <= self.window, "stride must be in 1..window")
        per_line = math.ceil(self.window / self.stride)
        check_setting(per_line <= MAX_FRAGMENTS_PER_LINE,
               f"window / stride (fragments holding each line, each a copy of it) must be at most "
               f"{MAX_FRAGMENTS_PER_LINE}, got {per_line} (window {self.window}, stride {self.stride}); raise stride")


@dataclass(frozen=True)
class GraphConfig:
    # FragRel Appendix A edge weights, each in (0, 1].
    syntax: float = 0.5
    directory: float = 0.3
    file: float = 1.0
    call: float = 0.8

    def validate(self) -> None:
        for name in ("syntax", "directory", "file", "call"):
            v = getattr(self, name)
            check_setting(0.0 < v <= 1.0, f"{name} weight must be in (0, 1], got {v}")


@dataclass(frozen=True)
class RelationConfig:
    cutoff: float = 0.1  # node pairs whose max-product path strength is below this are unrelated
    top_k: int = 32  # relations kept per fragment row
    max_reach: int = 256  # strongest nodes kept per node (bounds hubs); 0 = no bound
    context_weight: float = 0.0  # Eq. 7 w_rel for fragments of one file; 0 turns it off
    context_combine: str = "max"  # how Eq. 7 joins Eq. 8: "max" or "sum"

    def validate(self) -> None:
        check_setting(0.0 < self.cutoff < 1.0, "cutoff must be in (0, 1)")
        check_setting(0 < self.top_k <= 100_000, "top_k must be in 1..100000")
        check_setting(0 <= self.max_reach <= 10_000_000, "max_reach must be in 0..10000000")
        check_setting(0.0 <= self.context_weight < 1.0, "context_weight must be in [0, 1)")
        check_setting(self.context_combine in ("max", "sum"), "context_combine must be 'max' or 'sum'")
        # together: what one node reaches (max_reach, or the cutoff alone when 0) times what a row keeps (top_k)
        check_setting(self.max_reach > 0 or self.cutoff >= MIN_UNBOUNDED_CUTOFF,
               f"max_reach = 0 (no bound) needs cutoff >= {MIN_UNBOUNDED_CUTOFF}, got {self.cutoff}: below it every "
               "node reaches most of the graph; set max_reach (default 256)")
        check_setting(self.max_reach * self.top_k <= MAX_REACH_X_TOP_K,
               f"max_reach x top_k must be at most {MAX_REACH_X_TOP_K:,}, got {self.max_reach * self.top_k:,} "
               f"(max_reach {self.max_reach}, top_k {self.top_k})")
        if self.context_weight > 0.0:
            reach = math.log(self.cutoff) / math.log(self.context_weight)
            check_setting(reach <= MAX_CONTEXT_REACH,
                   f"context_weight {self.context_weight} with cutoff {self.cutoff} relates a window to "
                   f"{reach:,.0f} windows either side; at most {MAX_CONTEXT_REACH}: raise cutoff or lower "
                   "context_weight")


@dataclass(frozen=True)
class RetrievalConfig:
    similarity: str = "jaccard"  # "jaccard" (RepoCoder) or "bm25"
    # Relations in the similar-code ranking are off by default: with the local model on 400 line + 400 API tasks,
    # FragRel (alpha 0.5) and the query-side term (0.25) changed EM by -0.25 to -0.75 points, inside the noise
    # (README, Evaluation). The graph still ranks definitions ([definitions] w_relation).
    alpha: float = 0.0  # FragRel Eq. 10 (the paper's value is 0.5); 0 turns FragRel off
    query_relations: float = 0.0  # weight of cursor-region-to-candidate path strength (beyond the paper); 0 = off
    # FragRel Eq. 6: weight of the semantic relation (the cosine of the local model's mean input embeddings) beside
    # the structural one in Eq. 9, among the fragments most similar to the query (repocomp/context/semantic.py); with
    # alpha > 0 only; 0 = off
    semantic: float = 0.0
    top_k: int = 10
    # RepoCoder rounds (1 = vanilla retrieve-then-generate); 0 = the model's: 2, or 1 for the in-process local
    # model on CPU (repocomp.backends.model_defaults)
    iterations: int = 0
    # MemGPT's model-directed paging: after the last round, the repository names the draft uses that the prompt
    # does not define are looked up (their definitions) for one more round; no such name, no extra round. Off by
    # default: no exact match changed on 100 API tasks with the code model, at twice the time, and it cost 6 points
    # with Gemma 3 270M (docs/evaluation.md; `repocomp eval --paging`).
    paging: bool = False
    paging_max: int = 4  # definitions paged in at most
    # SCM's controller for retrieval: the prompt shows retrieved code only where the repository holds code more
    # similar to the query than the file in view above it (repocomp/context/retrieval_decision.py). Off: with the local code
    # model it skipped a quarter of the requests' retrieved code at equal EM, for a median request 1-2% faster
    # (docs/evaluation.md)
    selective: bool = False
    # While the user writes on in a file, a request at one of the next `keep_lines` lines below the one whose
    # context was made shows that context again (similar code, definitions, session edits, laid from the same
    # first line), so that its prompt is the earlier one plus what was typed and the runtime's prefix cache holds
    # the rest (repocomp/context/typed_line.py); 0 = only on the line itself. 4: the first request at a new line
    # p50 4.7 s -> 0.7 s on 2 cores, its first suggestion the line as often within noise (docs/performance.md)
    keep_lines: int = 4

    def validate(self) -> None:
        check_setting(1 <= self.paging_max <= 100, "paging_max must be in 1..100")
        check_setting(0 <= self.keep_lines <= 100, "keep_lines must be in 0..100")
        check_setting(self.similarity in SIMILARITIES, f"similarity must be one of {', '.join(SIMILARITIES)}")
        check_setting(0.0 <= self.alpha <= 1000.0, "alpha must be in [0, 1000]")
        check_setting(0.0 <= self.query_relations <= 1000.0, "query_relations must be in [0, 1000]")
        check_setting(0.0 <= self.semantic <= 1000.0, "semantic must be in [0, 1000]")
        check_setting(0 < self.top_k <= 10_000, "top_k must be in 1..10000")
        check_setting(0 <= self.iterations <= 100, "iterations must be in 0..100 (0 = the model's)")


@dataclass(frozen=True)
class PromptConfig:
    # budget for retrieved blocks + in-file context; 0 = the model's (see repocomp.backends.model_defaults: Code Llama's 4K
    # window minus max_new_tokens as in the FragRel paper; 1024 for the in-process local model on CPU)
    max_tokens: int = 0
    context_tokens: int = 0  # share of the budget kept for the in-file context; 0 = half of max_tokens
    max_blocks: int = 10
    merge_overlaps: bool = True  # overlapping similar-code hits of one file become one span, nothing shown twice
    # "auto" follows the model (model_defaults.prompt_format): Qwen2.5-Coder's FIM and repository files for a
    # model that has their tokens, else RepoCoder's comment layout without FIM
    fim: str = "auto"  # "auto", "none", "codellama", "starcoder" or "qwen"
    layout: str = "auto"  # "auto", "comments" (RepoCoder) or "files" (<|file_sep|>PATH blocks, Qwen2.5-Coder)
    # where a FIM prompt reads the code after the cursor (repocomp.prompt.suffix): "inline" (the cursor inside a line),
    # "continues" (also where the lines below continue the cursor's) or "always"; elsewhere the prefix only
    fim_at: str = "inline"
    suffix_lines: int = 0  # the most lines after the cursor's a FIM prompt reads; 0 = up to a quarter of context_tokens
    tokenizer: str = ""  # local tokenizer dir; empty = the model's when local, else a code-aware estimate

    def validate(self) -> None:
        check_setting(0 <= self.max_tokens <= 1_000_000, "max_tokens must be in 0..1000000 (0 = the model's)")
        check_setting(0 <= self.context_tokens and (self.max_tokens == 0 or self.context_tokens <= self.max_tokens),
               "context_tokens must be in 0..max_tokens (0 = half of max_tokens)")
        check_setting(0 <= self.max_blocks <= 10_000, "max_blocks must be in 0..10000")
        check_setting(self.fim in ("auto", *FIM_FORMATS), f"fim must be one of auto, {', '.join(FIM_FORMATS)}")
        check_setting(self.layout in ("auto", *PROMPT_LAYOUTS),
                      f"layout must be one of auto, {', '.join(PROMPT_LAYOUTS)}")
        check_setting(self.fim_at in FIM_AT, f"fim_at must be one of {', '.join(FIM_AT)}")
        check_setting(0 <= self.suffix_lines <= 10_000, "suffix_lines must be in 0..10000 (0 = a quarter of the budget)")


@dataclass(frozen=True)
class DefinitionsConfig:
    """Rationale context (repocomp.context.definitions): definitions the code before the cursor reaches, ranked."""

    enabled: bool = True
    # the section is left out of prompts below this budget (tokens): at 1,024 it displaced similar code that the
    # local model used more (README, Evaluation); 0 = at any budget
    min_budget: int = 2048
    share: float = 0.25  # most of the block budget the definitions section may take; similar code fills the rest
    max_definitions: int = 8
    max_lines: int = 12  # lines of one rendered definition
    docstring_lines: int = 3  # lines of a docstring's first paragraph
    scan_lines: int = 400  # lines before the cursor scanned for references
    similar_fragments: int = 5  # top similar blocks whose calls count as evidence
    position: str = "first"  # the section before the similar code ("first") or after it, nearest the code ("last")
    # ranking weights (chosen a priori; see repocomp.context.definitions)
    distance_scale: float = 20.0
    w_near: float = 1.0
    w_imported: float = 0.25
    w_prefix: float = 1.0
    w_relation: float = 0.5
    w_similar: float = 0.5

    def validate(self) -> None:
        check_setting(0 <= self.min_budget <= 1_000_000, "min_budget must be in 0..1000000 tokens")
        check_setting(0.0 <= self.share <= 1.0, "share must be in [0, 1]")
        check_setting(0 <= self.max_definitions <= 1000, "max_definitions must be in 0..1000")
        check_setting(1 <= self.max_lines <= 1000, "max_lines must be in 1..1000")
        check_setting(0 <= self.docstring_lines <= 1000, "docstring_lines must be in 0..1000")
        check_setting(0 <= self.scan_lines <= 100_000, "scan_lines must be in 0..100000")
        check_setting(0 <= self.similar_fragments <= 1000, "similar_fragments must be in 0..1000")
        check_setting(self.position in ("first", "last"), "position must be 'first' or 'last'")
        check_setting(0.0 < self.distance_scale <= 1e6, "distance_scale must be in (0, 1000000]")
        for name in ("w_near", "w_imported", "w_prefix", "w_relation", "w_similar"):
            check_setting(0.0 <= getattr(self, name) <= 1000.0, f"{name} must be in [0, 1000]")


@dataclass(frozen=True)
class MemoryConfig:
    """Session memory (repocomp.memory): recent edit hunks, their thoughts and the recall storage, and the
    controller that decides per request whether (and how much of) the session goes into the prompt. On by default:
    on 400 editing-session holes it raised the local model's EM (docs/evaluation.md, Editing-session tasks)."""

    enabled: bool = True
    share: float = 0.25  # of the prompt budget left after the in-file context
    max_entries: int = 4  # entries (hunks or thoughts) shown per request
    max_hunks: int = 200  # recent hunks kept in the queue (older ones move to recall storage)
    max_bytes: int = 256_000  # text of the recent hunks, all together
    store_max_bytes: int = 2_000_000  # the recall storage file in the user's cache
    replaced: bool = True  # show the code replaced at the cursor first (what the developer is rewriting)
    thoughts: bool = True  # derive thoughts (rename, signature change, repeated line shape) from hunks
    # FragRel over the session: s_rel = s_ind + alpha * s_env through the code graph. Off: not shown to help on
    # editing-session holes (docs/evaluation.md), and it costs a graph query per request
    relations: bool = False
    alpha: float = 0.5  # FragRel Eq. 10 for memory entries (the paper's value)
    # the controller's threshold (SCM's decision to consult the session): no entry above it, the session is not
    # consulted; 0 = consulted whenever it holds an entry. Off: never shown to help the code model (400 editor
    # holes: no difference; docs/evaluation.md, Decisions)
    min_score: float = 0.0
    persist: bool = True  # keep the recall storage across restarts
    half_life_s: float = 600.0  # recency: an entry's weight halves every this many seconds of the session
    # MemGPT's recursive summary written by the model when the session is idle, shown where a hunk's one-line
    # template would be (repocomp/memory/summaries.py); off: docs/evaluation.md has its measurement
    summaries: bool = False
    summary_idle_s: float = 2.0  # the language server writes one after this long without a request or an edit
    query_lines: int = 12  # lines before the cursor whose tokens are the controller's query

    def validate(self) -> None:
        check_setting(0.0 <= self.share <= 1.0, "share must be in [0, 1]")
        check_setting(0 <= self.max_entries <= 100, "max_entries must be in 0..100")
        check_setting(1 <= self.max_hunks <= 100_000, "max_hunks must be in 1..100000")
        check_setting(1_000 <= self.max_bytes <= 1 << 28, "max_bytes must be in 1000..268435456 (256 MiB)")
        check_setting(1_000 <= self.store_max_bytes <= 1 << 28, "store_max_bytes must be in 1000..268435456 (256 MiB)")
        check_setting(0.0 <= self.alpha <= 1000.0, "alpha must be in [0, 1000]")
        check_setting(0.0 <= self.min_score <= 1000.0, "min_score must be in [0, 1000]")
        check_setting(1.0 <= self.half_life_s <= _DAY_S * 365, "half_life_s must be in [1, 31536000] seconds")
        check_setting(1 <= self.query_lines <= 1000, "query_lines must be in 1..1000")
        check_setting(0.1 <= self.summary_idle_s <= 3600.0, "summary_idle_s must be in [0.1, 3600] seconds")



@dataclass(frozen=True)
class VllmConfig:
    """`[backend.vllm]`: the served model's servers."""

    endpoints: tuple[str, ...] = ("http://127.0.0.1:8000",)
    connect_timeout_s: float = 3.0
    retries: int = 2

    def validate(self) -> None:
        check_setting(0 < self.connect_timeout_s <= _DAY_S, "connect_timeout_s must be in (0, 86400] seconds")
        check_setting(0 <= self.retries <= 100, "retries must be in 0..100")
        check_setting(len(self.endpoints) > 0, "endpoints must not be empty")


@dataclass(frozen=True)
class TransformersConfig:
    """`[backend.transformers]`: the in-process transformers backend."""

    # "auto" (the checkpoint's; float32 on a CPU without native bf16), "float32" or "bfloat16"
    dtype: str = "auto"
    # greedy on CPU (bf16 or float32): pick each token through a float16 copy of the output matrix, certified to be
    # the full lm_head's token (else it runs); the same answers, each token about 45 ms sooner on 2 cores, for
    # 335 MB more memory and 1-2 s more load (output_head.py); only where this CPU's float16 product is faster than
    # the model's own, timed at load (on a Xeon with AMX it is not)
    fast_output_head: bool = True

    def validate(self) -> None:
        check_setting(self.dtype in ("auto", "float32", "bfloat16"), "dtype must be 'auto', 'float32' or 'bfloat16'")


@dataclass(frozen=True)
class OpenVINOConfig:
    """`[backend.openvino]`: the in-process OpenVINO GenAI backend."""

    # what the runtime computes in, its weights still 8-bit: "f32", or "bf16" (the runtime's own choice where the
    # CPU has bf16; ignored where it has not). On a 2-core Xeon with AMX f32 decodes a token a fifth sooner and
    # computes a new prompt about a third slower: typing is answered sooner, a new place unprefetched later
    # (docs/performance.md, Decisions)
    precision: str = "f32"

    def validate(self) -> None:
        check_setting(self.precision in ("f32", "bf16"), "precision must be 'f32' or 'bf16'")


@dataclass(frozen=True)
class BackendConfig:
    # "auto": the local model in process when one is prepared (`repocomp model prepare`), else "extractive"
    name: str = "auto"  # "auto" or a backend's name (BACKEND_NAMES: repocomp.backends.registry.BACKENDS)
    model: str = ""  # vllm: the served name ("" = ask the server); transformers: a folder ("" = the local model)
    timeout_s: float = 30.0
    # 0 = the model's: 128, or 48 for the in-process local model on CPU (repocomp.backends.model_defaults)
    max_new_tokens: int = 0
    # generation time of one round after its first token, past which the text so far is the answer; 0 = none
    # (a time limit makes the answer depend on the machine's load: the token cap bounds a generation instead)
    max_time_s: float = 0.0
    temperature: float = 0.0
    fallback: str = "extractive"  # backend used when the configured one fails; "" = none
    device: str = "cpu"  # where an in-process model runs
    # each backend's own settings, a section of its own
    vllm: VllmConfig = field(default_factory=VllmConfig)
    transformers: TransformersConfig = field(default_factory=TransformersConfig)
    openvino: OpenVINOConfig = field(default_factory=OpenVINOConfig)
    # keys that were [backend]'s own before the backends had sections: named in the error that a file using one gets
    MOVED: ClassVar[dict[str, str]] = {"endpoints": "vllm", "connect_timeout_s": "vllm", "retries": "vllm",
                                       "dtype": "transformers", "fast_output_head": "transformers"}

    def validate(self) -> None:
        check_setting(self.name == "auto" or self.name in BACKENDS, f"name must be one of auto, {', '.join(BACKENDS)}")
        check_setting(self.fallback in ("", "extractive"), "fallback must be 'extractive' or ''")
        check_setting(0 < self.timeout_s <= _DAY_S, "timeout_s must be in (0, 86400] seconds")
        check_setting(0 <= self.max_new_tokens <= 100_000, "max_new_tokens must be in 0..100000 (0 = the model's)")
        check_setting(0.0 <= self.max_time_s <= _DAY_S, "max_time_s must be in [0, 86400] seconds (0 = none)")
        check_setting(0.0 <= self.temperature <= 100.0, "temperature must be in [0, 100]")
        if not self.fallback:  # with a fallback, the vllm backend skips a malformed endpoint with a warning
            for url in self.vllm.endpoints:
                check_endpoint(url)


def check_endpoint(url: str) -> None:
    """`ValueError` unless `url` is an http(s) URL with a host and a valid port."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError as exc:
        raise ValueError(f"endpoint {shown(url)} is not a valid URL ({exc})") from None
    check_setting(parts.scheme in ("http", "https") and bool(parts.hostname),
           f"endpoint {shown(url)} must be http(s)://HOST[:PORT]")


def valid_endpoint(url: str) -> bool:
    try:
        check_endpoint(url)
    except ValueError:
        return False
    return True


def is_loopback(url: str) -> bool:
    """Does `url` name this machine (localhost, 127.0.0.0/8, ::1)?"""
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return False
    if not host:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Config:
    index: IndexConfig = field(default_factory=IndexConfig)
    fragments: FragmentConfig = field(default_factory=FragmentConfig)
    graph: GraphConfig = field(default_factory=GraphConfig)
    relations: RelationConfig = field(default_factory=RelationConfig)
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    prompt: PromptConfig = field(default_factory=PromptConfig)
    definitions: DefinitionsConfig = field(default_factory=DefinitionsConfig)
    backend: BackendConfig = field(default_factory=BackendConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)

    def replace(self, section: str, **changes: Any) -> Config:
        """A copy with some keys of one section changed (validated)."""
        current = dataclasses.asdict(getattr(self, section))
        merged = current | {k: current[k] | v if isinstance(v, dict) and isinstance(current.get(k), dict) else v
                            for k, v in changes.items()}  # a sub-section's keys given are changed, the rest kept
        return dataclasses.replace(self, **{section: build_section(type(getattr(self, section)), merged, section)})

    def plain_repocoder(self) -> Config:
        """RepoCoder as published: similar code only, no relations (FragRel, query side) and no definitions.

        The one place the FragRel switch (`--no-fragrel`) is turned into settings."""
        plain = self.replace("retrieval", alpha=0.0, query_relations=0.0, semantic=0.0)
        return plain.replace("definitions", enabled=False)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
