"""The session memory through the real language server (pytest-lsp): edits become hunks and thoughts, the inline
item's accept command records the completion, the controller's decisions are counted, and the session survives a
restart in the user's cache (never in the repository)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import pytest_lsp
from lsp_helpers import (
    SERVER_CMD,
    copy_repo,
    end_of,
    initialize,
    inline,
    make_client,
    open_doc,
    shut_down,
    stats,
    wait_ready,
)
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

from repocomp.cli import main as cli_main


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[*SERVER_CMD, "--no-watch"],
                                                    client_factory=make_client))
async def client(lsp_client: LanguageClient):
    yield
    await shut_down(lsp_client)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """The fixture repository with the session memory switched on (it is off by default)."""
    repo = copy_repo(tmp_path)
    (repo / "repocomp.toml").write_text("[memory]\nenabled = true\n")
    return repo


def type_change(client: LanguageClient, uri: str, version: int, line: int, col: int, text: str) -> None:
    at = types.Position(line=line, character=col)
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
        content_changes=[types.TextDocumentContentChangePartial(range=types.Range(start=at, end=at), text=text)]))


async def test_edits_join_the_session_and_an_accepted_completion_is_recorded(
        client: LanguageClient, repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    await initialize(client, repo, {"backend": {"name": "extractive"}})
    await wait_ready(client)
    pricing = repo / "shop" / "pricing.py"
    text = pricing.read_text()
    uri = open_doc(client, pricing, text)
    text.count("\n")
    added = "\n\ndef loyalty_price(price: float, points: int) -> float:\n    return round(price - points * 0.01, 2)\n"
    for i, ch in enumerate(added):  # typed key by key at the end of the file: one hunk
        lines = (text + added[:i]).split("\n")
        type_change(client, uri, i + 2, len(lines) - 1, len(lines[-1]), ch)
    # a new file that uses it: the memory is consulted, and its hunk is what the extractive backend copies
    buffer = "from shop.pricing import loyalty_price\n\n\ndef pay(price, points):\n    return round(price - "
    other = open_doc(client, repo / "shop" / "pay.py", buffer)
    answer = await inline(client, other, end_of(buffer))
    assert answer == "points * 0.01, 2)", answer
    s = await stats(client)
    assert s["memory"]["edits"] == len(added) and s["memory"]["hunks"] == 1, s["memory"]
    assert s["memory"]["consulted"] >= 1
    # the editor runs the item's command on accept
    result = await client.text_document_inline_completion_async(types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri=other), position=end_of(buffer),
        context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic)))
    (item,) = result.items
    assert item.command is not None and item.command.command == "repocomp.accept"
    await client.workspace_execute_command_async(types.ExecuteCommandParams(
        command=item.command.command, arguments=item.command.arguments))
    assert (await stats(client))["memory"]["accepted"] == 1
    # an editor that does not run the command: the next change inserting what was shown is the acceptance
    assert await inline(client, other, end_of(buffer)) == item.insert_text
    at = end_of(buffer)
    type_change(client, other, 2, at.line, at.character, item.insert_text)
    assert (await stats(client))["memory"]["accepted"] == 2
    await shut_down(client)
    # the session is on disk in the user's cache (the test's own), not in the repository
    assert not list(repo.rglob("*memory*"))
    capsys.readouterr()
    assert cli_main(["memory", "show", str(repo), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert any("loyalty_price" in "\n".join(h["inserted"]) for h in shown["hunks"]), shown
    assert cli_main(["memory", "clear", str(repo)]) == 0
    capsys.readouterr()
    assert cli_main(["memory", "show", str(repo), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["hunks"] == []
