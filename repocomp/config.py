"""All settings in one place: `[tool.repocomp]` in pyproject.toml or a repocomp.toml, validated on load.

Every section is a frozen dataclass; `load_config` fills them from TOML, naming unknown keys and bad values
(numbers must be finite and within sane bounds).

Where a setting comes from matters: a repository is untrusted input (README, "Security model"). The user's
own config file (`$XDG_CONFIG_HOME/repocomp/config.toml`), an explicit file the user names (`--config`), CLI
flags and LSP initialization options may set anything. A repository's own `repocomp.toml`/`pyproject.toml` may
not send code off the machine, make repocomp write outside the repository or raise its memory budget: there,
`[backend] endpoints` other than loopback, an `[index] dir` outside the root and an `[index] max_memory_mb` above the
default are dropped with a warning naming the file and key. No setting a repository may set points outside it: its
path-valued ones (`[prompt] tokenizer`, `[backend] model`) are taken from its root and dropped with a warning when
they lead out; its `[index] exclude` holds at most `MAX_REPOSITORY_EXCLUDES` patterns. The file itself is read only
when it is a regular file inside the root (a symlink leading out is not read), of at most `MAX_CONFIG_BYTES`; one
nested too deeply for the parser is a `ConfigError`, never a traceback. Settings whose product is the cost are validated together (window / stride,
max_reach x top_k, cutoff with max_reach = 0 or with context_weight), each rule naming its number.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import math
import os
import reprlib
import stat
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from repocomp.errors import ConfigError

# The fixed sets of names, each spelled once: validation, CLI choices and LSP options read these.
MODES = ("infile", "vanilla", "repocoder", "oracle")  # completion modes; oracle (ground truth as query) is eval-only
BACKEND_NAMES = ("auto", "extractive", "vllm", "transformers", "llamacpp")
EVAL_BACKENDS = ("none",) + tuple(n for n in BACKEND_NAMES if n != "auto")  # none: retrieval only
FIM_FORMATS = ("none", "codellama", "starcoder", "qwen")
FIM_AT = ("inline", "continues", "always")  # where a FIM prompt reads the code after the cursor (repocomp.prompt.suffix)
PROMPT_LAYOUTS = ("comments", "files")  # RepoCoder's commented blocks; Qwen2.5-Coder's repository files
SIMILARITIES = ("jaccard", "bm25")

log = logging.getLogger(__name__)

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

    def validate(self) -> None:
        check_setting(1 <= self.paging_max <= 100, "paging_max must be in 1..100")
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
    min_score: float = 0.05  # the controller's threshold: no entry above it, the session is not consulted
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
class BackendConfig:
    # "auto": the local model in process when one is prepared (`repocomp model prepare`), else "extractive"
    name: str = "auto"  # "auto", "extractive", "vllm", "transformers" or "llamacpp"
    model: str = ""  # vllm: the served name ("" = ask the server); transformers: a folder ("" = the local model)
    endpoints: tuple[str, ...] = ("http://127.0.0.1:8000",)
    timeout_s: float = 30.0
    connect_timeout_s: float = 3.0
    retries: int = 2
    # 0 = the model's: 128, or 48 for the in-process local model on CPU (repocomp.backends.model_defaults)
    max_new_tokens: int = 0
    # generation time of one round after its first token, past which the text so far is the answer; 0 = none
    # (a time limit makes the answer depend on the machine's load: the token cap bounds a generation instead)
    max_time_s: float = 0.0
    temperature: float = 0.0
    fallback: str = "extractive"  # backend used when the configured one fails; "" = none
    device: str = "cpu"  # transformers backend
    # transformers backend: "auto" (the checkpoint's; float32 on a CPU without native bf16), "float32" or "bfloat16"
    dtype: str = "auto"
    # transformers backend, greedy on CPU (bf16 or float32): pick each token through a float16 copy of the output
    # matrix, certified to be the full lm_head's token (else it runs); the same answers, each token about 45 ms
    # sooner on 2 cores, for 335 MB more memory and 1-2 s more load (output_head.py)
    fast_output_head: bool = True

    def validate(self) -> None:
        check_setting(self.name in BACKEND_NAMES, f"name must be one of {', '.join(BACKEND_NAMES)}")
        check_setting(self.dtype in ("auto", "float32", "bfloat16"), "dtype must be 'auto', 'float32' or 'bfloat16'")
        check_setting(self.fallback in ("", "extractive"), "fallback must be 'extractive' or ''")
        check_setting(0 < self.timeout_s <= _DAY_S, "timeout_s must be in (0, 86400] seconds")
        check_setting(0 < self.connect_timeout_s <= _DAY_S, "connect_timeout_s must be in (0, 86400] seconds")
        check_setting(0 <= self.retries <= 100, "retries must be in 0..100")
        check_setting(0 <= self.max_new_tokens <= 100_000, "max_new_tokens must be in 0..100000 (0 = the model's)")
        check_setting(0.0 <= self.max_time_s <= _DAY_S, "max_time_s must be in [0, 86400] seconds (0 = none)")
        check_setting(0.0 <= self.temperature <= 100.0, "temperature must be in [0, 100]")
        check_setting(len(self.endpoints) > 0, "endpoints must not be empty")
        if not self.fallback:  # with a fallback, the vllm backend skips a malformed endpoint with a warning
            for url in self.endpoints:
                check_endpoint(url)


def check_endpoint(url: str) -> None:
    """`ValueError` unless `url` is an http(s) URL with a host and a valid port."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError as exc:
        raise ValueError(f"endpoint {_shown(url)} is not a valid URL ({exc})") from None
    check_setting(parts.scheme in ("http", "https") and bool(parts.hostname),
           f"endpoint {_shown(url)} must be http(s)://HOST[:PORT]")


def _valid_endpoint(url: str) -> bool:
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
        merged = dataclasses.asdict(getattr(self, section)) | changes
        return dataclasses.replace(self, **{section: build_section(type(getattr(self, section)), merged, section)})

    def plain_repocoder(self) -> Config:
        """RepoCoder as published: similar code only, no relations (FragRel, query side) and no definitions.

        The one place the FragRel switch (`--no-fragrel`) is turned into settings."""
        plain = self.replace("retrieval", alpha=0.0, query_relations=0.0, semantic=0.0)
        return plain.replace("definitions", enabled=False)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _shown(value: Any) -> str:
    """`value` for a one-line message: depth and length bounded (a repository's value may be nested thousands
    deep or megabytes long; a plain repr of it raised RecursionError or filled the terminal)."""
    shown = reprlib.Repr()
    shown.maxlevel, shown.maxstring, shown.maxother, shown.maxlist, shown.maxdict = 3, 80, 80, 6, 6
    return shown.repr(value)


def _names(names: list[str], limit: int = 10) -> str:
    """A bounded list of names for a message (a file may hold thousands of unknown keys)."""
    more = f" and {len(names) - limit:,} more" if len(names) > limit else ""
    return ", ".join(_shown(n) if not n.isidentifier() else n for n in names[:limit]) + more


def coerce_setting(tp: Any, value: Any, where: str) -> Any:
    """`value` as a setting of type `tp` (a ConfigError naming `where` otherwise): the one converter of settings
    from TOML files and from editors' options."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):  # `X | None`: None, or an X
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        return None if value is None else coerce_setting(inner, value, where)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {_shown(value)}")
        if not math.isfinite(value):
            raise ConfigError(f"{where}: expected a finite number, got {_shown(value)}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {_shown(value)}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {_shown(value)}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true/false, got {_shown(value)}")
        return value
    if origin is tuple:
        if isinstance(value, str) or not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {_shown(value)}")
        (item_tp, _) = typing.get_args(tp)
        return tuple(coerce_setting(item_tp, v, f"{where}[{i}]") for i, v in enumerate(value))
    raise ConfigError(f"{where}: unsupported type {tp}")  # pragma: no cover - schema bug


def build_section(cls: type, data: dict[str, Any], where: str) -> Any:
    """A settings dataclass from a table of its fields, converted and checked by its `validate()` rules."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"unknown key(s) in [{where}]: {_names(unknown)} (known: {', '.join(sorted(names))})")
    values = {k: coerce_setting(hints[k], v, f"{where}.{k}") for k, v in data.items()}
    obj = cls(**values)
    try:
        obj.validate()
    except ValueError as exc:
        raise ConfigError(f"bad value in [{where}]: {exc}") from None
    return obj


def config_from_dict(data: dict[str, Any], where: str = "tool.repocomp") -> Config:
    if not isinstance(data, dict):
        raise ConfigError(f"[{where}] must be a table")
    sections = {f.name: f for f in dataclasses.fields(Config)}
    unknown = sorted(set(data) - set(sections))
    if unknown:
        raise ConfigError(f"unknown section(s) in [{where}]: {_names(unknown)} (known: {', '.join(sections)})")
    built = {}
    for name, value in data.items():
        if not isinstance(value, dict):
            raise ConfigError(f"[{where}.{name}] must be a table, got {_shown(value)}")
        built[name] = build_section(typing.get_type_hints(Config)[name], value, f"{where}.{name}")
    return Config(**built)


def _read_toml(path: Path, repository: Path | None = None) -> dict[str, Any] | None:
    """The TOML document of a config file: a regular file of at most `MAX_CONFIG_BYTES`, parsed whatever its
    nesting (a RecursionError of the parser is a `ConfigError`).

    `repository`: the file is the repository's own (untrusted): a symbolic link is followed only to a file inside
    that root, and a file that is not regular, leads out or is too large is ignored with a warning (None)."""
    where = path
    if repository is not None:
        root = repository.resolve()
        resolved: Path | None
        try:
            resolved = path.resolve()
        except (OSError, RuntimeError):  # a symlink loop
            resolved = None
        if resolved is None or not resolved.is_relative_to(root):
            _warn_once(path, "file", f"{path} is a symbolic link leading outside the repository; not read")
            return None
        where = resolved
    try:
        # O_NONBLOCK: a FIFO swapped in after the check neither blocks the open nor is read (fstat below)
        fd = os.open(where, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
                     | (os.O_NOFOLLOW if repository is not None else 0))
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise ConfigError(f"config {path} is not a regular file")
            data = fh.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from None
    except ConfigError:
        if repository is None:
            raise
        _warn_once(path, "file", f"{path} is not a regular file; not read")
        return None
    if len(data) > MAX_CONFIG_BYTES:
        too_big = f"{path} is larger than {MAX_CONFIG_BYTES:,} bytes; not read"
        if repository is None:
            raise ConfigError(f"config {too_big}")
        _warn_once(path, "file", f"{too_big}: using the other settings")
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"config {path} is not UTF-8 text; TOML files must be UTF-8") from None
    if max(line.count(".") for line in text.split("\n")) > MAX_DOTS_PER_LINE:
        raise ConfigError(f"config {path} is nested too deeply to read (a line with more than {MAX_DOTS_PER_LINE} "
                          "dots); flatten its keys")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config {path} is not valid TOML: {exc}") from None
    except (RecursionError, MemoryError):  # `a = [[[[...` thousands deep: the parser recurses per level
        raise ConfigError(f"config {path} is nested too deeply to read; flatten its arrays and tables") from None


def _tool_table(data: dict[str, Any], path: Path, required: bool) -> dict[str, Any] | None:
    """`[tool.repocomp]` of a TOML document; with `required=False`, the whole document when it has no `tool`."""
    if "tool" not in data:
        return None if required else data
    tool = data["tool"]
    if not isinstance(tool, dict):
        raise ConfigError(f"{path}: `tool` must be a table (holding [tool.repocomp]), got {_shown(tool)}")
    if "repocomp" not in tool:
        return None if required else data
    return tool["repocomp"]


def user_cache_dir() -> Path:
    """repocomp's folder in the user's cache (`$XDG_CACHE_HOME/repocomp`, by default ~/.cache/repocomp): the local
    model, indexes of repositories that cannot be written, session memories, evaluation trees."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "repocomp"


def user_config_file() -> Path:
    """The user's own settings (trusted): `$XDG_CONFIG_HOME/repocomp/config.toml`, by default under ~/.config."""
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "repocomp" / "config.toml"


_warned: set[tuple[str, str]] = set()


def _warn_once(path: Path, key: str, message: str) -> None:
    if (str(path), key) not in _warned:
        _warned.add((str(path), key))
        log.warning("%s", message)


def _inside(value: str, root: Path, names_ok: bool) -> str | None:
    """A path-valued setting of a repository: as an absolute path inside `root` (a relative one is taken from the
    root, not the process's folder), or unchanged when `names_ok` and it is a name (`org/model`) with no such
    path in the repository; None when it points elsewhere (absolute, `~`, `..` leading out, a link out)."""
    if value == "":
        return value
    if value.startswith("~"):
        return None
    parts = Path(value).parts
    if names_ok and not Path(value).is_absolute() and not {".", ".."} & set(parts) \
            and not os.path.lexists(root / value):
        return value
    try:
        full = (root / value).resolve()
    except (OSError, RuntimeError):
        return None
    return str(full) if full.is_relative_to(root) else None


def _distrust(table: Any, path: Path, repo_root: Path) -> Any:
    """A repository's own table without the settings it may not choose; says so once per file and key."""
    if not isinstance(table, dict):
        return table
    dropped: list[tuple[str, str]] = []
    backend = table.get("backend")
    if isinstance(backend, dict) and isinstance(backend.get("endpoints"), (list, tuple)):
        remote = [e for e in backend["endpoints"] if isinstance(e, str) and _valid_endpoint(e) and not is_loopback(e)]
        if remote:
            dropped.append(("backend.endpoints", f"{_shown(remote[0])} is not a loopback address; a repository may "
                            "only name endpoints on this machine"))
    root = Path(repo_root).resolve()
    index = table.get("index")
    if isinstance(index, dict) and isinstance(index.get("dir"), str):
        if not (root / index["dir"]).resolve().is_relative_to(root):
            dropped.append(("index.dir", f"{_shown(index['dir'])} is outside the repository"))
    budget = index.get("max_memory_mb") if isinstance(index, dict) else None
    if isinstance(budget, int) and budget > IndexConfig.max_memory_mb:  # a repository may lower it, not raise it
        dropped.append(("index.max_memory_mb", f"{budget:,} is above the default {IndexConfig.max_memory_mb:,}"))
    if isinstance(index, dict) and isinstance(index.get("exclude"), (list, tuple)) \
            and len(index["exclude"]) > MAX_REPOSITORY_EXCLUDES:  # each is matched against every path
        dropped.append(("index.exclude", f"{len(index['exclude']):,} patterns, at most "
                        f"{MAX_REPOSITORY_EXCLUDES:,} from a repository"))
    # path-valued settings: read from the repository only, anchored at its root
    anchored: dict[str, str] = {}
    for key, names_ok in (("prompt.tokenizer", False), ("backend.model", True)):
        section, name = key.split(".")
        value = table.get(section, {}).get(name) if isinstance(table.get(section), dict) else None
        if isinstance(value, str):
            inside = _inside(value, root, names_ok)
            if inside is None:
                dropped.append((key, f"{_shown(value)} is outside the repository"))
            elif inside != value:
                anchored[key] = inside
    if not dropped and not anchored:
        return table
    table = {k: dict(v) if isinstance(v, dict) else v for k, v in table.items()}
    for key, value in anchored.items():
        section, name = key.split(".")
        table[section][name] = value
    for key, why in dropped:
        section, name = key.split(".")
        del table[section][name]
        _warn_once(path, key, f"{path}: [{section}] {name} ignored: {why}; set it in {user_config_file()}, with "
                   "--config or in the editor's settings")
    return table


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """Section-wise: `top`'s keys over `base`'s."""
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in base.items()}
    for section, values in top.items():
        if isinstance(values, dict) and isinstance(out.get(section), dict):
            out[section] = out[section] | values
        else:
            out[section] = values
    return out


def load_config(repo_root: Path | None = None, config_file: Path | None = None) -> Config:
    """The user's config file, overlaid with an explicit `config_file` or else the repository's own settings.

    Repository settings: `repocomp.toml` (sections at top level or under [tool.repocomp]), else
    `[tool.repocomp]` in pyproject.toml; they are untrusted (see the module doc). `config_file` is trusted:
    pass only a file the user named (the CLI's --config). A repocomp.toml or explicit file holds the sections at
    top level, or under [tool.repocomp].
    """
    layers: list[tuple[str, Any]] = []
    user = user_config_file()
    if user.is_file():
        layers.append((str(user), _tool_table(_read_toml(user) or {}, user, required=False)))
    if config_file is not None:
        own = Path(config_file)
        layers.append((str(own), _tool_table(_read_toml(own) or {}, own, required=False)))
    elif repo_root is not None:
        local, pyproject = Path(repo_root) / "repocomp.toml", Path(repo_root) / "pyproject.toml"
        # a link is judged by `_read_toml` (inside the root or not read); a FIFO or folder is passed over unopened
        source = next((f for f in (local, pyproject) if f.is_symlink() or f.is_file()), None)
        document = _read_toml(source, Path(repo_root)) if source is not None else None
        if source is not None and document is not None:
            table = _tool_table(document, source, required=source is pyproject)
            if table is not None:
                label = str(source) if source is local else f"{source}: tool.repocomp"
                layers.append((label, _distrust(table, source, Path(repo_root))))
    if not layers:
        return Config()
    for where, table in layers:
        if not isinstance(table, dict):
            raise ConfigError(f"[{where}] must be a table, got {_shown(table)}")
    merged: dict[str, Any] = {}
    for _, table in layers:
        merged = _merge(merged, table)
    return config_from_dict(merged, " + ".join(where for where, _ in layers))
