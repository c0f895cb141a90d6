"""Shared pytest fixtures. Each group sits in its own clearly named section; append yours in a new section."""

from __future__ import annotations

import asyncio
import faulthandler
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from pytest_lsp import ClientServerConfig, LanguageClient

REPO_ROOT = Path(__file__).resolve().parent.parent

# ---- a hung test fails the run with every thread's stack instead of eating CI's whole time budget ------------

PHASE_LIMIT_S = 900.0  # per setup, call and teardown; the slowest real phase (starting vLLM) takes about 2 minutes
_STDERR_FD = pytest.StashKey[int]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_STDERR_FD] = os.dup(sys.stderr.fileno())  # the terminal, not the per-test capture


def _watched(item: pytest.Item) -> Iterator[None]:
    # Per phase, not per test: pytest cancels the one faulthandler timer when a test fails, so a timer armed
    # for the whole test would not cover its teardown (where a server that does not exit hangs).
    faulthandler.dump_traceback_later(PHASE_LIMIT_S, exit=True, file=item.config.stash[_STDERR_FD])
    try:
        return (yield)
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    return (yield from _watched(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    return (yield from _watched(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    return (yield from _watched(item))


# ---- backends: tiny model + real CPU vLLM server ------------------------------------------------------------

VLLM_STARTUP_TIMEOUT_S = 300.0


class VLLMServer(str):
    """The server's base URL (a str, e.g. "http://127.0.0.1:PORT"), plus where its output goes and what it serves."""

    log_path: Path
    model: str
    process: subprocess.Popen[bytes]

    def log_count(self, needle: str) -> int:
        return self.log_path.read_text(encoding="utf-8", errors="replace").count(needle)

    async def wait_for_log(self, needle: str, above: int, timeout_s: float, what: str,
                           still: Callable[[], bool] = lambda: True) -> None:
        """Until the server's log has more than `above` lines with `needle` (the log, not /metrics: on a busy CPU
        machine the API process answers /metrics seconds late); fails saying `what` never happened."""
        deadline = time.monotonic() + timeout_s
        while self.log_count(needle) <= above:
            assert still(), f"gave up waiting: {what}"
            assert time.monotonic() < deadline, f"not within {timeout_s:g} s: {what}"
            await asyncio.sleep(0.05)


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    """A tiny random-weight Llama built locally (cached in .cache/, rebuilt when its inputs change).

    Built in-process when torch and transformers are importable here, else with the vLLM venv's interpreter
    (which has both), so the vLLM tests do not need torch in the project's own environment.
    """
    out = REPO_ROOT / ".cache" / "tiny-llama"
    if importlib.util.find_spec("torch") and importlib.util.find_spec("transformers"):
        try:
            from tiny_model import build_tiny_model  # tests/ is on sys.path under pytest's default import mode
        except ImportError:
            from tests.tiny_model import build_tiny_model
        return build_tiny_model(out)
    python = vllm_python()
    if python is None:
        pytest.fail("building the tiny model needs torch + transformers here, or the vLLM venv: "
                    "run `bash .ci/setup`", pytrace=False)
    proc = subprocess.run([str(python), str(REPO_ROOT / "tests" / "tiny_model.py"), str(out)],
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        pytest.fail(f"building the tiny model with {python} failed:\n{proc.stderr[-3000:]}", pytrace=False)
    return out


def vllm_python() -> Path | None:
    """The vLLM virtualenv's interpreter: $REPOCOMP_VLLM_PYTHON, then .venv-vllm/, then /work/vllm-venv/."""
    env = os.environ.get("REPOCOMP_VLLM_PYTHON")
    candidates = [Path(env)] if env else [REPO_ROOT / ".venv-vllm" / "bin" / "python", Path("/work/vllm-venv/bin/python")]
    return next((p for p in candidates if p.is_file() and os.access(p, os.X_OK)), None)


@pytest.fixture(scope="session")
def vllm_interpreter() -> Path:
    """The vLLM virtualenv's interpreter (fails, never skips, when there is none)."""
    python = vllm_python()
    if python is None:
        pytest.fail("no vLLM virtualenv: run `bash .ci/setup` (or `bash .ci/setup_vllm.sh`)", pytrace=False)
    return python


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop_process_group(proc: subprocess.Popen[bytes], grace_s: float = 20.0) -> None:
    """SIGTERM the server's whole process group (it forks engine workers), SIGKILL if it lingers."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    except ProcessLookupError:
        pass


@pytest.fixture(scope="session")
def vllm_server(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMServer]:
    """A real vLLM OpenAI-compatible server on loopback serving the tiny model; yields its base URL."""
    python = vllm_python()
    if python is None:
        pytest.fail(
            "no vLLM virtualenv found (looked at $REPOCOMP_VLLM_PYTHON, .venv-vllm/bin/python, "
            "/work/vllm-venv/bin/python): run `bash .ci/setup` (or `bash .ci/setup_vllm.sh`) first",
            pytrace=False,
        )
    port = _free_port()
    log_path = tmp_path_factory.mktemp("vllm") / "server.log"
    env = dict(os.environ)
    env.update(
        VLLM_CPU_KVCACHE_SPACE="1",  # GiB of KV cache; the default is far more than a test machine spares
        PYTHONUNBUFFERED="1",
        VLLM_NO_USAGE_STATS="1",
        VLLM_DO_NOT_TRACK="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
    )
    cmd = [
        str(python), "-m", "vllm.entrypoints.openai.api_server",  # the `vllm` script fails under vllm-cpu
        "--model", str(tiny_model_dir),
        "--dtype", "float32",
        "--host", "127.0.0.1",
        "--port", str(port),
        "--max-model-len", "16384",
        "--enable-log-requests",  # logs "Aborted request(s) ID." when a client goes away (tests read it)
    ]
    url = f"http://127.0.0.1:{port}"
    with log_path.open("wb") as log_fh:
        # Its own process group (killed whole at the end) but not its own session: a session is a scheduler
        # autogroup, where the `nice` below would not count against our processes.
        proc = subprocess.Popen(cmd, stdout=log_fh, stderr=subprocess.STDOUT, env=env, process_group=0)
    try:
        deadline = time.monotonic() + VLLM_STARTUP_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                tail = log_path.read_text(errors="replace")[-4000:]
                pytest.fail(f"vLLM server exited with {proc.returncode} during startup; log tail:\n{tail}", pytrace=False)
            try:
                if httpx.get(f"{url}/v1/models", timeout=2.0, trust_env=False).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                tail = log_path.read_text(errors="replace")[-4000:]
                pytest.fail(f"vLLM server not ready after {VLLM_STARTUP_TIMEOUT_S:g}s; log tail:\n{tail}", pytrace=False)
            time.sleep(0.5)
        # Niced once started (starting takes minutes of CPU): on 2 cores its engine takes both while generating
        # and starved the code under test (pytest, the language server) for tens of seconds, which broke the
        # timing of every test sharing the machine with it.
        os.setpriority(os.PRIO_PGRP, proc.pid, 10)
        server = VLLMServer(url)
        server.log_path = log_path
        server.model = str(tiny_model_dir)
        server.process = proc
        yield server
    finally:
        _stop_process_group(proc)


# ---- the real local model (Qwen2.5-Coder 0.5B, prepared by `.ci/setup` with `repocomp model prepare`) -------

from repocomp.backends.local_model import LocalModel, default_model_dir, prepared  # noqa: E402

_PREPARED_MODEL_DIR = default_model_dir()  # read before any test changes the environment


@pytest.fixture(autouse=True)
def _no_local_model_by_default(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Tests see no prepared model (the default backend is then extractive, and budgets use the estimate), and
    no hint stamps or indexes land in the user's cache; tests about the real model ask for `local_model`."""
    cache = tmp_path_factory.mktemp("xdg-cache")  # per test: a hint shown in one test is not "already shown" in another
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(cache / "config"))  # nor the developer's own config.toml
    monkeypatch.setenv("REPOCOMP_MODEL_DIR", str(cache / "no-model"))


@pytest.fixture(scope="session")
def local_model() -> LocalModel:
    model = prepared(_PREPARED_MODEL_DIR)
    if model is None:
        pytest.fail(f"no prepared local model at {_PREPARED_MODEL_DIR}: run `bash .ci/setup` "
                    "(or `repocomp model prepare`)", pytrace=False)
    return model


# ---- the language server as an editor starts it, over stdio (pytest-lsp): the `client` fixture ----------------
# A test module sets SERVER_ARGS (e.g. ("--no-watch",)) to start it with more arguments.

@pytest_asyncio.fixture
async def client(request: pytest.FixtureRequest) -> AsyncIterator[LanguageClient]:
    from lsp_helpers import SERVER_CMD, make_client, shut_down

    config = ClientServerConfig(server_command=[*SERVER_CMD, *getattr(request.module, "SERVER_ARGS", ())],
                                client_factory=make_client)
    lsp_client = await config.start(devtools=request.config.getoption("devtools"))
    yield lsp_client
    await shut_down(lsp_client)  # bounded: shutdown, exit, the client stopped
