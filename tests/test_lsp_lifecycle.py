"""The session around completions, through the real server: TCP serving (with hostile frames on the wire), a
workspace folder removed and added again, configuration pulled from the client, a second `initialize`.

Backend: `extractive` (model-free); the fixture repository is `fixtures/lsp_repo`. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

import pytest
from lsp_helpers import (
    CHECKOUT,
    EXPECTED,
    SERVER_CMD,
    capabilities,
    copy_repo,
    end_of,
    initialize,
    inline,
    make_client,
    open_doc,
    stats,
    wait_ready,
)
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pytest_lsp import LanguageClient

BOUND_S = 30.0


SERVER_ARGS = ("--no-watch",)  # the `client` fixture (tests/conftest.py) starts the server so


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return copy_repo(tmp_path)


async def until(check, what: str, bound_s: float = BOUND_S):
    """Poll the coroutine function `check` until it returns something truthy; that value."""
    deadline = time.monotonic() + bound_s
    while not (value := await asyncio.wait_for(check(), bound_s)):
        assert time.monotonic() < deadline, f"not within {bound_s:g} s: {what}"
        await asyncio.sleep(0.05)
    return value


# ----- TCP ------------------------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def connect(client: LanguageClient, port: int, bound_s: float = BOUND_S) -> None:
    deadline = time.monotonic() + bound_s
    while True:
        try:
            await client.start_tcp("127.0.0.1", port)
            return
        except OSError:
            assert time.monotonic() < deadline, f"the server did not listen on port {port} within {bound_s:g} s"
            await asyncio.sleep(0.1)


async def test_tcp_serves_a_client_through_hostile_frames_and_exits_cleanly(repo: Path, tmp_path: Path) -> None:
    port = free_port()
    with open(tmp_path / "server.stderr", "wb") as stderr:
        proc = await asyncio.create_subprocess_exec(*SERVER_CMD, "--tcp", f"127.0.0.1:{port}", "--no-watch",
                                                    stdin=asyncio.subprocess.DEVNULL, stderr=stderr)
    client = make_client()
    try:
        await connect(client, port)
        await asyncio.wait_for(initialize(client, repo), BOUND_S)
        await wait_ready(client)
        uri = open_doc(client, repo / "shop" / "checkout.py", CHECKOUT)
        assert (await asyncio.wait_for(inline(client, uri, end_of(CHECKOUT)), BOUND_S)).strip().startswith(EXPECTED)
        # frames the framing rejects, each carrying a configuration that would turn completions off: an over-long
        # header line, then too many header lines; the server drops both and keeps serving
        disable = (b'{"jsonrpc": "2.0", "method": "workspace/didChangeConfiguration", '
                   b'"params": {"settings": {"repocomp": {"enable": false}}}}')
        long_line = b"X-Long: " + b"a" * (1024 * 1024) + b"\r\n"
        many_lines = b"".join(b"X-Pad-%d: 1\r\n" % i for i in range(100))
        writer = client.protocol.writer
        for headers in (long_line, many_lines):
            writer.write(b"Content-Length: %d\r\n" % len(disable) + headers + b"\r\n" + disable)  # type: ignore[union-attr]
        await stats(client)  # read and dispatched by now; had one been taken, its change would land meanwhile
        await asyncio.sleep(0.3)
        assert (await asyncio.wait_for(inline(client, uri, end_of(CHECKOUT)), BOUND_S)).strip().startswith(EXPECTED)
        assert (await stats(client))["failed"] == 0
        await asyncio.wait_for(client.shutdown_async(None), BOUND_S)
        client.exit(None)
        assert await asyncio.wait_for(proc.wait(), BOUND_S) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await asyncio.wait_for(proc.wait(), 10)
        await asyncio.wait_for(client.stop(), 10)


# ----- workspace folders ----------------------------------------------------------------------------------------

async def folder_roots(client: LanguageClient) -> list[Path]:
    return [Path(f["root"]) for f in (await stats(client))["folders"]]


async def test_a_removed_folder_completes_in_file_only_until_it_is_added_again(
        client: LanguageClient, repo: Path) -> None:
    await initialize(client, repo, {"backend": {"name": "extractive"}})
    await wait_ready(client)
    uri = open_doc(client, repo / "shop" / "checkout.py", CHECKOUT)
    assert (await inline(client, uri, end_of(CHECKOUT))).strip().startswith(EXPECTED)
    folder = types.WorkspaceFolder(uri=repo.as_uri(), name=repo.name)

    client.workspace_did_change_workspace_folders(types.DidChangeWorkspaceFoldersParams(
        event=types.WorkspaceFoldersChangeEvent(added=[], removed=[folder])))
    await until(lambda: _no_folders(client), "the folder's index let go of")
    # the repository's other files are no longer seen: the answer is in-file (nothing there to copy from)
    assert EXPECTED not in await inline(client, uri, end_of(CHECKOUT))

    client.workspace_did_change_workspace_folders(types.DidChangeWorkspaceFoldersParams(
        event=types.WorkspaceFoldersChangeEvent(added=[folder], removed=[])))
    assert await until(lambda: folder_roots(client), "the folder added again") == [repo.resolve()]
    await wait_ready(client)
    assert (await inline(client, uri, end_of(CHECKOUT))).strip().startswith(EXPECTED)


async def _no_folders(client: LanguageClient) -> bool:
    return not await folder_roots(client)


# ----- configuration --------------------------------------------------------------------------------------------

async def test_settings_of_none_pull_the_configuration_from_the_client(client: LanguageClient, repo: Path) -> None:
    caps = capabilities()
    assert caps.workspace is not None
    caps.workspace.configuration = True
    await client.initialize_session(types.InitializeParams(
        capabilities=caps, root_uri=repo.as_uri(), initialization_options={},
        workspace_folders=[types.WorkspaceFolder(uri=repo.as_uri(), name=repo.name)]))
    await wait_ready(client)
    uri = open_doc(client, repo / "shop" / "checkout.py", CHECKOUT)
    assert (await inline(client, uri, end_of(CHECKOUT))).strip().startswith(EXPECTED)

    async def completion() -> str:
        return await inline(client, uri, end_of(CHECKOUT))

    # the notification carries no settings: the server asks the client for its `repocomp` section
    client.set_configuration({"enable": False}, section="repocomp")
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    await until(lambda: _is_empty(completion), "completions turned off by the pulled configuration")
    client.set_configuration({"enable": True}, section="repocomp")
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    text = await until(completion, "completions turned on again by the pulled configuration")
    assert text.strip().startswith(EXPECTED)


async def _is_empty(completion) -> bool:
    return await completion() == ""


# ----- lifecycle ------------------------------------------------------------------------------------------------

async def test_a_second_initialize_is_refused_and_the_session_goes_on(client: LanguageClient, repo: Path) -> None:
    await initialize(client, repo)
    await wait_ready(client)
    params = types.InitializeParams(capabilities=capabilities(), root_uri=repo.as_uri(), initialization_options={
        "enable": False})
    with pytest.raises(JsonRpcException) as refused:
        await asyncio.wait_for(client.initialize_async(params), BOUND_S)
    assert refused.value.code == types.ErrorCodes.InvalidRequest and "only once" in str(refused.value)
    # its options were not applied: completions are still on
    uri = open_doc(client, repo / "shop" / "checkout.py", CHECKOUT)
    assert (await inline(client, uri, end_of(CHECKOUT))).strip().startswith(EXPECTED)


def test_shutdown_while_notification_handlers_run_cancels_them_and_answers() -> None:
    """A `shutdown` that arrives while notifications' handlers still run: cancelling each runs its callbacks at
    once, which forget it (the protocol's bookkeeping); pygls iterated the live dict and answered the shutdown
    with "dictionary changed size during iteration"."""
    from concurrent.futures import Future

    from lsp_server.server import create_server

    protocol = create_server(build_index=False).protocol
    pending = {f"note-{i}": Future() for i in range(3)}
    for msg_id, future in pending.items():
        protocol._request_futures[msg_id] = future
        future.add_done_callback(lambda _, msg_id=msg_id: protocol._request_futures.pop(msg_id, None))
    steps = protocol.lsp_shutdown()
    assert next(steps)[0] is protocol.fm.features[types.SHUTDOWN]  # the server's own handler runs first
    with pytest.raises(StopIteration):
        steps.send(None)
    assert all(future.cancelled() for future in pending.values())
    assert protocol._request_futures == {} and protocol.shutdown_received
