"""The session memory through the real language server (pytest-lsp): edits become hunks and thoughts, the inline
item's accept command records the completion, the controller's decisions are counted, and the session survives a
restart in the user's cache (never in the repository)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from lsp_helpers import (
    copy_repo,
    end_of,
    initialize,
    inline,
    open_doc,
    shut_down,
    stats,
    wait_ready,
)
from lsprotocol import types
from pytest_lsp import LanguageClient

from repocomp.cli import main as cli_main

SERVER_ARGS = ("--no-watch",)  # the `client` fixture (tests/conftest.py) starts the server so


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """The fixture repository (the session memory is on by default)."""
    return copy_repo(tmp_path)


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


async def test_a_retyped_line_is_completed_from_the_code_it_replaced_with_the_sessions_renames(
        client: LanguageClient, repo: Path) -> None:
    """Through the real server: the developer renamed `zone` to `region` in one file, then deletes a function's body
    in another and retypes it; the code they deleted, renamed as before, is what the extractive backend copies."""
    await initialize(client, repo, {"backend": {"name": "extractive"}})
    await wait_ready(client)
    zones = "def zone_name(zone):\n    return zone.title()\n"
    zones_uri = open_doc(client, repo / "shop" / "zones.py", zones)
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=zones_uri, version=2),
        content_changes=[types.TextDocumentContentChangePartial(
            range=types.Range(start=types.Position(line=0, character=0), end=types.Position(line=2, character=0)),
            text=zones.replace("zone", "region").replace("region_name", "zone_name"))]))
    body = ('    base = 4.5 if zone == "domestic" else 12.0\n'
            '    per_kg = 0.75 if zone == "domestic" else 2.5\n'
            "    return round(base + per_kg * weight, 2)\n")
    head = "def shipping_cost(weight, zone):\n"
    uri = open_doc(client, repo / "shop" / "shipping.py", head + body)
    client.text_document_did_change(types.DidChangeTextDocumentParams(  # the body selected and deleted
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
        content_changes=[types.TextDocumentContentChangePartial(
            range=types.Range(start=types.Position(line=1, character=0), end=types.Position(line=4, character=0)),
            text="")]))
    typed = '    base = 5.0 if region == "domestic" else 12.0\n    per_kg = '
    for i, ch in enumerate(typed):
        lines = (head + typed[:i]).split("\n")
        type_change(client, uri, i + 3, len(lines) - 1, len(lines[-1]), ch)
    answer = await inline(client, uri, end_of(head + typed))
    assert answer == '0.75 if region == "domestic" else 2.5', answer
    s = await stats(client)
    assert s["memory"]["consulted"] >= 1 and s["memory"]["hunks"] == 2, s["memory"]


@pytest.mark.slow
async def test_the_server_asks_for_the_session_summary_when_idle_and_answers_a_request_meanwhile(
        client: LanguageClient, repo: Path, tiny_model_dir: Path) -> None:
    """`[memory] summaries`: after `summary_idle_s` without activity the model (the tiny random one) is asked to
    fold the settled hunks into the summary; a request while the next one may be being written is answered (and
    stops it: tests/test_memory_summaries.py checks the cancelling and what is kept), and the next idle moment asks
    again. Whether the random model's words are kept (a sentence, not a lone '.') depends on its tokenizer, which
    is trained on this checkout's code: so the test counts the model's answers, not the summaries kept."""
    options = {"backend": {"name": "transformers", "model": str(tiny_model_dir), "transformers": {"dtype": "float32"},
                           "maxNewTokens": 4, "timeoutS": 120},
               "memory": {"summaries": True, "summaryIdleS": 0.2},
               "server": {"requestTimeoutMs": 120_000}}
    await initialize(client, repo, options)
    await wait_ready(client)
    pricing = repo / "shop" / "pricing.py"
    text = pricing.read_text()
    uri = open_doc(client, pricing, text)
    end = end_of(text)
    type_change(client, uri, 2, 0, 0, "import math\n")  # two hunks far apart: the first is settled
    type_change(client, uri, 3, end.line + 1, 0, "\n\ndef rounded(x):\n    return math.floor(x)\n")
    deadline = time.monotonic() + 120
    while (s := await stats(client))["memory"]["summaries_answered"] < 1:
        assert time.monotonic() < deadline, s["memory"]
        await asyncio.sleep(0.2)
    assert s["memory"]["summaries_pending"] == 0 and s["failed"] == 0
    type_change(client, uri, 4, 0, 0, "import os\n")  # a new settled hunk: the next summary starts when idle
    await asyncio.sleep(0.25)
    await asyncio.wait_for(inline(client, uri, types.Position(line=end.line + 5, character=0)), 150)
    assert (await stats(client))["failed"] == 0  # answered, whatever the summary was doing
    while (s := await stats(client))["memory"]["summaries_answered"] < 2:  # the request re-armed the idle timer
        assert time.monotonic() < deadline, s["memory"]
        await asyncio.sleep(0.2)
