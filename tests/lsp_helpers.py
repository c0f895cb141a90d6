"""Helpers shared by the LSP tests: the fixture repository, a session starter and small request wrappers."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient, make_test_lsp_client

REPO_ROOT = Path(__file__).resolve().parent.parent
FIXTURE_REPO = REPO_ROOT / "fixtures" / "lsp_repo"
# REPOCOMP_LSP_LOG=/tmp/lsp.log keeps the servers' debug logs for a failing run
SERVER_CMD = [sys.executable, "-m", "lsp_server",
              *(["--log-file", os.environ["REPOCOMP_LSP_LOG"], "--log-level", "debug"]
                if os.environ.get("REPOCOMP_LSP_LOG") else [])]

# The buffer the tests type into: a new module reusing the fixture's idioms. Line 5 ends at the cursor.
CHECKOUT = (
    "from shop.pricing import apply_discount, with_tax\n"
    "\n"
    "\n"
    "def checkout(cart, discount_percent):\n"
    "    subtotal = sum(price * quantity for _, price, quantity in cart.items)\n"
    "    discounted_total = "
)
EXPECTED = "apply_discount(subtotal, discount_percent)"


def copy_repo(tmp_path: Path) -> Path:
    dest = tmp_path / "lsp_repo"
    shutil.copytree(FIXTURE_REPO, dest)
    return dest


def capabilities() -> types.ClientCapabilities:
    return types.ClientCapabilities(
        window=types.WindowClientCapabilities(work_done_progress=True, show_message=None),
        workspace=types.WorkspaceClientCapabilities(
            configuration=False,
            did_change_configuration=types.DidChangeConfigurationClientCapabilities(dynamic_registration=False),
            did_change_watched_files=types.DidChangeWatchedFilesClientCapabilities(dynamic_registration=True),
            workspace_folders=True,
        ),
        text_document=types.TextDocumentClientCapabilities(
            synchronization=types.TextDocumentSyncClientCapabilities(did_save=True),
            completion=types.CompletionClientCapabilities(),
            inline_completion=types.InlineCompletionClientCapabilities(),
        ),
        general=types.GeneralClientCapabilities(position_encodings=[types.PositionEncodingKind.Utf16]),
    )


async def initialize(client: LanguageClient, repo: Path, options: dict[str, Any] | None = None) -> types.InitializeResult:
    return await client.initialize_session(
        types.InitializeParams(
            capabilities=capabilities(),
            root_uri=repo.as_uri(),
            workspace_folders=[types.WorkspaceFolder(uri=repo.as_uri(), name=repo.name)],
            initialization_options=options or {},
        )
    )


async def stats(client: LanguageClient) -> dict[str, Any]:
    result = await client.protocol.send_request_async("repocomp/stats", {})
    return _plain(result)


def _plain(value: Any) -> Any:
    """pygls hands custom results back as attrs-like objects or dicts; make them dicts."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if hasattr(value, "_asdict"):
        return {k: _plain(v) for k, v in value._asdict().items()}
    if hasattr(value, "__dict__") and not isinstance(value, (str, int, float, bool)):
        return {k: _plain(v) for k, v in vars(value).items()}
    return value


async def wait_ready(client: LanguageClient, timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        s = await stats(client)
        states = [f["state"] for f in s["folders"]]
        if states and all(st in ("ready", "failed") for st in states):
            assert all(st == "ready" for st in states), s
            return s
        if time.monotonic() > deadline:
            raise AssertionError(f"index not ready after {timeout} s: {s}")
        await asyncio.sleep(0.1)


async def wait_version(client: LanguageClient, repo: Path, above: int, timeout: float = 10.0) -> int:
    deadline = time.monotonic() + timeout
    while True:
        version = await folder_version(client, repo)
        if version > above:
            return version
        if time.monotonic() > deadline:
            raise AssertionError(f"no index update landed within {timeout} s")
        await asyncio.sleep(0.05)


async def folder_version(client: LanguageClient, repo: Path, timeout: float = 10.0) -> int:
    """The folder's index version once the server has no update pending (an opened or edited buffer reaches
    the index in the background: a version read before that lands would be passed by it, not by the change
    a test waits for)."""
    deadline = time.monotonic() + timeout
    while (payload := await stats(client))["updates_pending"] and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return next(f["version"] for f in payload["folders"] if Path(f["root"]) == repo.resolve())


def open_doc(client: LanguageClient, path: Path, text: str, version: int = 1) -> str:
    uri = path.as_uri()
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id="python", version=version, text=text)
        )
    )
    return uri


def end_of(text: str) -> types.Position:
    """The LSP (UTF-16) position at the end of `text`."""
    lines = text.split("\n")
    return types.Position(line=len(lines) - 1, character=len(lines[-1].encode("utf-16-le")) // 2)


async def inline(client: LanguageClient, uri: str, position: types.Position) -> str:
    result = await client.text_document_inline_completion_async(
        types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=position,
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic),
        )
    )
    items = result.items if isinstance(result, types.InlineCompletionList) else (result or [])
    assert len(items) <= 1
    if not items:
        return ""
    text = items[0].insert_text
    return text if isinstance(text, str) else text.value


def warnings(client: LanguageClient) -> list[str]:
    return [m.message for m in client.messages if m.type == types.MessageType.Warning]


def make_client() -> LanguageClient:
    """pytest-lsp's client, plus a `client/registerCapability` handler (the server registers file watchers), and
    safe to stop waiting for a request (`asyncio.wait_for` timing out) before its answer arrives."""
    client = make_test_lsp_client()
    client.registrations = []  # type: ignore[attr-defined]
    _drop_late_responses(client)

    @client.feature(types.CLIENT_REGISTER_CAPABILITY)
    def register(params: types.RegistrationParams) -> None:
        client.registrations.extend(params.registrations)  # type: ignore[attr-defined]

    return client


def _drop_late_responses(client: LanguageClient) -> None:
    """pygls 2.1.1 settles a request's future when the answer arrives even if the caller stopped waiting (its
    future was cancelled): InvalidStateError, which pytest-lsp takes for a fatal server error, so one timed-out
    request broke the session and its teardown (pygls#621, fixed after 2.1.1). Drop such answers instead."""
    protocol = client.protocol
    handle_response = protocol._handle_response

    def handle(msg_id: Any, result: Any = None, error: Any = None) -> None:
        future = protocol._request_futures.get(msg_id)
        if future is not None and future.cancelled():
            del protocol._request_futures[msg_id]
            return
        handle_response(msg_id, result, error)

    protocol._handle_response = handle  # type: ignore[method-assign]


async def shut_down(lsp_client: LanguageClient, timeout_s: float = 30.0) -> None:
    """shutdown + exit, then stop the client, every step bounded: pytest-lsp waits for the server process without
    a limit, so a server that does not exit (or a client that broke and sent nothing) would hang the whole suite.
    Kill the server and fail instead."""
    problem = ""
    server = lsp_client._server  # pytest-lsp keeps the server process here
    try:
        if server is not None and server.returncode is None:  # else a test already ended it
            await asyncio.wait_for(lsp_client.shutdown_session(), timeout_s)
    except TimeoutError:
        problem = f"the language server did not shut down within {timeout_s:g} s"
    except Exception as exc:  # the client broke: still stop everything below
        problem = f"shutdown failed: {type(exc).__name__}: {exc}"
    if server is not None and server.returncode is None:
        try:  # after a client error shutdown_session sends nothing; pytest-lsp has terminated the server then
            await asyncio.wait_for(server.wait(), 10)
        except TimeoutError:
            server.kill()
            problem = problem or "the language server did not exit after shutdown (killed)"
    await asyncio.wait_for(lsp_client.stop(), 10)
    if problem:
        pytest.fail(problem)
