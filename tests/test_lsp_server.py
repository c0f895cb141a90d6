"""End-to-end tests of the language server over stdio, driven by pytest-lsp (the pygls project's own harness).

Backend: `extractive` (model-free) unless a test says otherwise; the fixture repository is `fixtures/lsp_repo`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import pytest_lsp
from lsp_helpers import (
    CHECKOUT,
    EXPECTED,
    SERVER_CMD,
    copy_repo,
    end_of,
    folder_version,
    initialize,
    inline,
    make_client,
    open_doc,
    shut_down,
    stats,
    wait_ready,
    wait_version,
    warnings,
)
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[*SERVER_CMD, "--no-watch"],
                                                    client_factory=make_client))
async def nowatch_client(lsp_client: LanguageClient):
    yield
    await shut_down(lsp_client)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return copy_repo(tmp_path)


class Blackhole:
    """A fake LLM endpoint that accepts requests and never answers; records when clients hang up."""

    def __init__(self) -> None:
        self.opened = 0
        self.closed: list[float] = []
        self.server: asyncio.Server | None = None
        self.url = ""

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.opened += 1
        try:
            while await reader.read(65536):
                pass
        finally:
            self.closed.append(time.monotonic())
            writer.close()

    async def wait_for(self, check: Callable[[Blackhole], bool], timeout_s: float = 2.0) -> None:
        """Until `check(self)` holds or `timeout_s` passed (callers assert what they need)."""
        deadline = time.monotonic() + timeout_s
        while not check(self) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()


@pytest.fixture
async def hole() -> AsyncIterator[Blackhole]:
    """A started Blackhole; `hole.url` is its endpoint."""
    blackhole = Blackhole()
    await blackhole.start()
    yield blackhole
    await blackhole.stop()


async def test_initialize_advertises_inline_completion_and_sync(client: LanguageClient, repo: Path) -> None:
    result = await initialize(client, repo)
    caps = result.capabilities
    assert caps.inline_completion_provider is not None and caps.inline_completion_provider is not False
    assert caps.completion_provider is not None
    sync = caps.text_document_sync
    assert isinstance(sync, types.TextDocumentSyncOptions)
    assert sync.change == types.TextDocumentSyncKind.Incremental
    assert sync.open_close is True
    save = sync.save
    assert isinstance(save, types.SaveOptions) and save.include_text is True
    assert result.server_info is not None and result.server_info.name == "repocomp"


async def test_indexing_reports_work_done_progress(client: LanguageClient, repo: Path) -> None:
    await initialize(client, repo)
    await wait_ready(client)
    for _ in range(50):  # the end notification follows the state change
        kinds = [p.value.kind for reports in client.progress_reports.values() for p in reports
                 if hasattr(p, "value")] if client.progress_reports else []
        if "end" in kinds:
            break
        await asyncio.sleep(0.05)
    (token,) = client.progress_reports.keys()
    kinds = [getattr(p, "kind", None) or p.get("kind") for p in client.progress_reports[token]]
    assert kinds[0] == "begin" and kinds[-1] == "end"


async def test_inline_completion_uses_the_repository_and_the_unsaved_buffer(client: LanguageClient, repo: Path) -> None:
    await initialize(client, repo)
    await wait_ready(client)
    # the buffer exists only in the editor (never saved): the completion must come from the other files
    uri = open_doc(client, repo / "shop" / "checkout.py", CHECKOUT)
    text = await inline(client, uri, end_of(CHECKOUT))
    assert text.strip().startswith(EXPECTED), text


@pytest.mark.parametrize("folder", ["my repo", "caf\u00e9 #1 100%"])
async def test_a_folder_whose_uri_is_percent_encoded_completes_as_a_plain_one(
        client: LanguageClient, tmp_path: Path, folder: str) -> None:
    """Editors percent-encode spaces, accents, `#` and `%` in URIs; pygls keys documents by the decoded URI.
    Opening, typing, syncing the buffer and completing must all find the document."""
    repo = copy_repo(tmp_path / folder)
    assert "%" in repo.as_uri()
    await initialize(client, repo)
    await wait_ready(client)
    head, typed = CHECKOUT.rsplit("\n", 1)
    uri = open_doc(client, repo / "shop" / "checkout.py", head + "\n" + typed[:3])
    line = head.count("\n") + 1
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
        content_changes=[types.TextDocumentContentChangePartial(
            range=types.Range(start=types.Position(line=line, character=3), end=types.Position(line=line, character=3)),
            text=typed[3:])]))
    text = await inline(client, uri, end_of(CHECKOUT))
    assert text.strip().startswith(EXPECTED), text
    assert not warnings(client)
    # the buffer reaches the index after the pause, as in a plain folder
    version = await folder_version(client, repo)
    probe = open_doc(client, repo / "shop" / "probe.py", "def h():\n    magic_value = ")
    (repo / "shop" / "helper.py").write_text("def helper():\n    return 1\n")
    helper = open_doc(client, repo / "shop" / "helper.py", "def helper():\n    return 1\n")
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=helper, version=2),
        content_changes=[types.TextDocumentContentChangeWholeDocument(
            text="def helper():\n    magic_value = unsaved_answer(7)\n    return magic_value\n")]))
    assert await wait_version(client, repo, version) > version
    assert (await inline(client, probe, end_of("def h():\n    magic_value = "))).startswith("unsaved_answer(7)")


async def test_at_the_end_of_a_complete_line_the_next_line_is_offered_and_accepted(
        client: LanguageClient, repo: Path) -> None:
    """The cursor at the end of a finished line gets the next line (a line break, then the line as the repository
    indents it), and accepting it leaves the buffer as the developer would write it."""
    await initialize(client, repo)
    await wait_ready(client)
    buffer = CHECKOUT + EXPECTED
    uri = open_doc(client, repo / "shop" / "checkout.py", buffer)
    result = await client.text_document_inline_completion_async(types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=end_of(buffer),
        context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic)))
    (item,) = result.items
    assert item.insert_text == "\n    return with_tax(discounted_total)"
    assert item.range == types.Range(start=end_of(buffer), end=end_of(buffer))
    # accepted: the editor inserts the item at its range
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
        content_changes=[types.TextDocumentContentChangePartial(range=item.range, text=item.insert_text)]))
    accepted = buffer + item.insert_text
    assert accepted.endswith(EXPECTED + "\n    return with_tax(discounted_total)")
    # the next request reads the accepted buffer: its last line is complete and nothing in the repository follows it
    assert await inline(client, uri, end_of(accepted)) == ""


async def test_an_empty_line_gets_the_line_it_starts(client: LanguageClient, repo: Path) -> None:
    """The developer pressed Enter: the answer is the one line they are starting, with its indentation, even where
    the code it is drawn from goes on over several lines (a call whose arguments span three); a request inside a
    line answers one line too."""
    (repo / "shop" / "report.py").write_text("def report(order):\n    summary = describe_order(order)\n"
                                             "    send_report(\n        summary,\n        order.owner,\n    )\n")
    await initialize(client, repo)
    await wait_ready(client)
    buffer = "def report_again(order):\n    summary = describe_order(order)\n\n"
    uri = open_doc(client, repo / "shop" / "again.py", buffer)
    assert await inline(client, uri, types.Position(line=2, character=0)) == "    send_report("
    # inside a line, too, the answer ends with the line: after an open bracket at its end, the next line of the
    # statement (the one after it comes with the next request)
    uri = open_doc(client, repo / "shop" / "third.py", buffer.replace("\n\n", "\n    send_report(\n"))
    rest = await inline(client, uri, types.Position(line=2, character=len("    send_report(")))
    assert rest == "\n        summary,", rest


async def test_typing_incremental_changes_then_complete(client: LanguageClient, repo: Path) -> None:
    await initialize(client, repo)
    await wait_ready(client)
    head, typed = CHECKOUT.rsplit("\n", 1)
    uri = open_doc(client, repo / "shop" / "checkout.py", head + "\n")
    line = head.count("\n") + 1
    for i, ch in enumerate(typed):  # one incremental change per keystroke, a completion request after each
        pos = types.Position(line=line, character=i)
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=i + 2),
            content_changes=[types.TextDocumentContentChangePartial(range=types.Range(start=pos, end=pos), text=ch)],
        ))
        if i % 5 == 0:
            await inline(client, uri, types.Position(line=line, character=i + 1))
    text = await inline(client, uri, types.Position(line=line, character=len(typed)))
    assert text.strip().startswith(EXPECTED), text
    # every notification's handler has finished and is forgotten (pygls kept one future per keystroke)
    assert (await stats(client))["handlers_running"] == 0
    # a full-text change replaces everything
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=100),
        content_changes=[types.TextDocumentContentChangeWholeDocument(text="def price_label(price):\n    gross = ")],
    ))
    text = await inline(client, uri, types.Position(line=1, character=12))
    assert text.strip().startswith("price * (1 + TAX_RATE)"), text


async def test_an_unsaved_buffer_reaches_the_index_when_typing_pauses_and_leaves_it_on_close(
        client: LanguageClient, repo: Path) -> None:
    await initialize(client, repo)
    await wait_ready(client)
    probe = "def h():\n    magic_value = "
    probe_uri = open_doc(client, repo / "shop" / "probe.py", probe)
    helper = repo / "shop" / "helper.py"
    helper.write_text("def helper():\n    return 1\n")
    uri = open_doc(client, helper, helper.read_text())
    version = await folder_version(client, repo)
    client.text_document_did_change(types.DidChangeTextDocumentParams(  # typed, never saved
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
        content_changes=[types.TextDocumentContentChangeWholeDocument(
            text="def helper():\n    magic_value = unsaved_answer(7)\n    return magic_value\n")]))
    assert await wait_version(client, repo, version) > version  # landed after the pause, with no request
    assert (await inline(client, probe_uri, end_of(probe))).startswith("unsaved_answer(7)")
    version = await folder_version(client, repo)
    client.text_document_did_close(types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri)))
    await wait_version(client, repo, version)  # the edits were discarded: the file on disk again
    assert "unsaved_answer" not in await inline(client, probe_uri, end_of(probe))


async def test_completion_fallback_item_replaces_the_prefix_utf16(client: LanguageClient, repo: Path) -> None:
    await initialize(client, repo)
    await wait_ready(client)
    line = '    return "价格 🙂 " + format_pr'
    buffer = "def label_of(price):\n" + line
    uri = open_doc(client, repo / "shop" / "labels.py", buffer)
    pos = end_of(buffer)
    assert pos.character == len(line) + 1  # the emoji is two UTF-16 code units
    result = await client.text_document_completion_async(types.CompletionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=pos))
    items = result.items if isinstance(result, types.CompletionList) else result
    (item,) = items
    edit = item.text_edit
    assert isinstance(edit, types.TextEdit)
    assert edit.range.start == types.Position(line=1, character=line.index("format_pr") + 1)
    assert edit.range.end == pos
    assert edit.new_text.startswith("format_price(price)"), edit.new_text
    # applying the edit as a client does gives the line of the fixture
    lines = buffer.split("\n")
    units = lines[1].encode("utf-16-le")
    applied = (units[: 2 * edit.range.start.character].decode("utf-16-le") + edit.new_text.split("\n")[0])
    assert applied.startswith('    return "价格 🙂 " + format_price(price)')


async def test_inline_completion_mid_line_after_emoji(client: LanguageClient, repo: Path) -> None:
    await initialize(client, repo)
    await wait_ready(client)
    before = '    return "价格 🙂 " + '
    buffer = "def label_of(price):\n" + before + "format_price"
    uri = open_doc(client, repo / "shop" / "labels.py", buffer)
    col = len(before.encode("utf-16-le")) // 2  # a str-index mix-up would land one character further
    text = await inline(client, uri, types.Position(line=1, character=col))
    assert text.strip().startswith("format_price(price)"), text  # not "ormat_price(...)"


async def test_a_request_the_client_stopped_waiting_for_breaks_nothing(
        client: LanguageClient, repo: Path, hole: Blackhole) -> None:
    """The answer to a request the test gave up on arrives later (here: at the request's deadline, the server's
    `requestTimeoutMs`, over a backend that never answers and whose own timeout is a minute); the session goes
    on and shuts down cleanly (the test client drops that answer)."""
    await initialize(client, repo, {"backend": {"name": "vllm", "vllm": {"endpoints": [hole.url]}, "timeoutS": 60},
                                    "server": {"requestTimeoutMs": 1000}})
    uri = open_doc(client, repo / "shop" / "checkout.py", CHECKOUT)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(inline(client, uri, end_of(CHECKOUT)), 0.2)
    await hole.wait_for(lambda h: len(h.closed) >= 1, 10)  # the deadline passed and the server answered by now
    s = await stats(client)
    assert s["cut_by_time"] == 1 and s["failed"] == 0 and client.error is None


async def test_a_deadline_that_empties_the_answer_is_said_once(
        client: LanguageClient, repo: Path, hole: Blackhole) -> None:
    """A backend that never answers within the completion's deadline: the editor gets an empty list and one
    message saying why (it got nothing and no word before), and the stats count it."""
    await initialize(client, repo, {"backend": {"name": "vllm", "vllm": {"endpoints": [hole.url]}, "model": "m",
                                                "timeoutS": 1}})
    await wait_ready(client)
    # outside the folder, in a file the extractive fallback finds nothing to copy from
    buffer = "def f():\n    return "
    uri = open_doc(client, repo.parent / "scratch.py", buffer)
    for _ in range(2):
        assert await asyncio.wait_for(inline(client, uri, end_of(buffer)), 10) == ""
    await asyncio.sleep(0.2)
    shown = [m for m in warnings(client) if "no completion" in m]
    assert len(shown) == 1 and "1 s deadline" in shown[0] and "timeout_s" in shown[0], warnings(client)
    assert (await stats(client))["cut_by_time"] >= 1  # the second may fail fast: the endpoint is marked down


async def test_superseded_request_is_cancelled_and_its_stream_closed(
        client: LanguageClient, repo: Path, hole: Blackhole) -> None:
    await initialize(client, repo, {"backend": {"name": "vllm", "vllm": {"endpoints": [hole.url]}, "timeoutS": 60}})
    uri = open_doc(client, repo / "shop" / "checkout.py", CHECKOUT)
    first = asyncio.ensure_future(inline(client, uri, end_of(CHECKOUT)))
    await hole.wait_for(lambda h: h.opened >= 1)
    assert hole.opened >= 1, "the backend never saw the first request"
    t0 = time.monotonic()
    msg_id = "second-request"
    # one character to the left: not the first request plus typing, so its generation cannot serve this one
    moved = types.Position(line=end_of(CHECKOUT).line, character=end_of(CHECKOUT).character - 1)
    second = asyncio.ensure_future(client.protocol.send_request_async(
        types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=moved,
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked)),
        msg_id=msg_id))
    assert await asyncio.wait_for(first, 5) == ""  # superseded: answered empty, promptly
    superseded_after = time.monotonic() - t0
    await hole.wait_for(lambda h: len(h.closed) >= 1)
    assert hole.closed, "the first request's backend stream was not closed"
    assert superseded_after < 1.0, superseded_after
    # $/cancelRequest cancels the second one (it hangs on the blackhole) and closes its stream too
    await hole.wait_for(lambda h: h.opened >= 2)
    closed_before = len(hole.closed)
    client.protocol.notify("$/cancelRequest", types.CancelParams(id=msg_id))
    with pytest.raises(Exception) as exc:
        await asyncio.wait_for(second, 5)
    assert "cancel" in str(exc.value).lower()
    await hole.wait_for(lambda h: len(h.closed) > closed_before)
    assert len(hole.closed) > closed_before
    s = await stats(client)
    assert s["superseded"] >= 1 and s["cancelled"] >= 1


async def test_robustness_empty_results_and_one_warning_per_kind(client: LanguageClient, repo: Path) -> None:
    await initialize(client, repo, {"server": {"maxDocumentBytes": 5000}})
    uri = open_doc(client, repo / "shop" / "checkout.py", CHECKOUT)
    bad = {
        "uri": ((repo / "shop" / "never_opened.py").as_uri(), types.Position(line=0, character=0)),
        "position": (uri, types.Position(line=99, character=0)),
        "scheme": (open_doc(client, Path("/x"), "x = 1", 1).replace("file:///x", "untitled:Untitled-1"),
                   types.Position(line=0, character=0)),
    }
    client.text_document_did_open(types.DidOpenTextDocumentParams(text_document=types.TextDocumentItem(
        uri="untitled:Untitled-1", language_id="python", version=1, text="x = 1")))
    bin_uri = open_doc(client, repo / "blob.py", "abc\x00def")
    huge_uri = open_doc(client, repo / "huge.py", "x = 1\n" * 2000)
    bad["binary"] = (bin_uri, types.Position(line=0, character=1))
    bad["huge"] = (huge_uri, types.Position(line=1, character=0))
    for _ in range(3):
        for uri_, pos in bad.values():
            assert await inline(client, uri_, pos) == ""
            result = await client.text_document_completion_async(types.CompletionParams(
                text_document=types.TextDocumentIdentifier(uri=uri_), position=pos))
            assert result is None or not (result.items if isinstance(result, types.CompletionList) else result)
    deadline = time.monotonic() + 10  # the messages travel apart from the answers: wait for them, bounded
    while len(warnings(client)) < len(bad) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.2)  # and for any more
    shown = warnings(client)
    assert len(shown) == len(bad), shown  # one per failure kind, not one per request
    # the server is still healthy
    await wait_ready(client)
    assert (await inline(client, uri, end_of(CHECKOUT))).strip().startswith(EXPECTED)


async def test_backend_down_warns_once_and_never_crashes(client: LanguageClient, repo: Path) -> None:
    await initialize(client, repo, {"backend": {"name": "vllm", "vllm": {"endpoints": ["http://127.0.0.1:9"]}, "timeoutS": 2}})
    await wait_ready(client)
    uri = open_doc(client, repo / "shop" / "checkout.py", CHECKOUT)
    for _ in range(3):
        await inline(client, uri, end_of(CHECKOUT))  # the extractive fallback may answer
    await asyncio.sleep(0.2)
    shown = [m for m in warnings(client) if "backend" in m]
    assert len(shown) == 1, warnings(client)
    assert "vllm" in shown[0]


async def test_change_configuration_disable_enable_and_invalid(client: LanguageClient, repo: Path) -> None:
    await initialize(client, repo)
    await wait_ready(client)
    uri = open_doc(client, repo / "shop" / "checkout.py", CHECKOUT)
    assert (await inline(client, uri, end_of(CHECKOUT))).strip().startswith(EXPECTED)
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"repocomp": {"enable": False}}))
    assert await inline(client, uri, end_of(CHECKOUT)) == ""
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        settings={"repocomp": {"enable": True, "retrieval": {"alpha": "lots", "iterations": 1}}}))
    assert (await inline(client, uri, end_of(CHECKOUT))).strip().startswith(EXPECTED)
    await asyncio.sleep(0.1)
    assert any("retrieval.alpha" in m for m in warnings(client)), warnings(client)


async def test_watched_file_events_update_and_remove(nowatch_client: LanguageClient, repo: Path) -> None:
    client = nowatch_client
    await initialize(client, repo)
    await wait_ready(client)
    buffer = "def answer():\n    magic_value = "
    uri = open_doc(client, repo / "shop" / "answer.py", buffer)
    assert "compute_the_answer" not in await inline(client, uri, end_of(buffer))
    fresh = repo / "shop" / "fresh.py"
    fresh.write_text("def f():\n    magic_value = compute_the_answer(41) + 1\n    return magic_value\n")
    version = await folder_version(client, repo)
    client.workspace_did_change_watched_files(types.DidChangeWatchedFilesParams(
        changes=[types.FileEvent(uri=fresh.as_uri(), type=types.FileChangeType.Created)]))
    await wait_version(client, repo, version)
    assert (await inline(client, uri, end_of(buffer))).startswith("compute_the_answer(41) + 1")
    # renamed: the old path disappears, the new one is indexed
    moved = repo / "shop" / "moved.py"
    fresh.rename(moved)
    version = await folder_version(client, repo)
    client.workspace_did_change_watched_files(types.DidChangeWatchedFilesParams(changes=[
        types.FileEvent(uri=fresh.as_uri(), type=types.FileChangeType.Deleted),
        types.FileEvent(uri=moved.as_uri(), type=types.FileChangeType.Created)]))
    await wait_version(client, repo, version)
    assert (await inline(client, uri, end_of(buffer))).startswith("compute_the_answer(41) + 1")
    moved.unlink()
    version = await folder_version(client, repo)
    client.workspace_did_change_watched_files(types.DidChangeWatchedFilesParams(
        changes=[types.FileEvent(uri=moved.as_uri(), type=types.FileChangeType.Deleted)]))
    await wait_version(client, repo, version)
    assert "compute_the_answer" not in await inline(client, uri, end_of(buffer))


async def test_an_index_update_does_not_wait_for_a_generation(
        nowatch_client: LanguageClient, repo: Path, hole: Blackhole) -> None:
    """The read lock is handed back while the model generates: a file change lands while a completion waits on
    a backend that never answers (it used to wait for the generation: the 60 s deadline here)."""
    client = nowatch_client
    await initialize(client, repo, {"backend": {"name": "vllm", "vllm": {"endpoints": [hole.url]}, "timeoutS": 60}})
    await wait_ready(client)
    uri = open_doc(client, repo / "shop" / "checkout.py", CHECKOUT)
    version = await folder_version(client, repo)
    pending = asyncio.ensure_future(inline(client, uri, end_of(CHECKOUT)))
    await hole.wait_for(lambda h: h.opened >= 1)
    assert hole.opened >= 1, "the backend never saw the request"
    fresh = repo / "shop" / "fresh.py"
    fresh.write_text("def f():\n    return 1\n")
    client.workspace_did_change_watched_files(types.DidChangeWatchedFilesParams(
        changes=[types.FileEvent(uri=fresh.as_uri(), type=types.FileChangeType.Created)]))
    await wait_version(client, repo, version, timeout=10.0)
    assert not pending.done()  # still generating: the update did not wait for it
    # a second completion elsewhere reads the updated index while the first still generates
    other = open_doc(client, repo / "shop" / "other.py", "def g():\n    return ")
    second = asyncio.ensure_future(inline(client, other, end_of("def g():\n    return ")))
    await hole.wait_for(lambda h: h.opened >= 2)
    assert hole.opened >= 2 and not pending.done()
    for request in (pending, second):
        request.cancel()


async def test_save_is_visible_to_the_next_completion(nowatch_client: LanguageClient, repo: Path) -> None:
    client = nowatch_client
    await initialize(client, repo)
    await wait_ready(client)
    pricing = repo / "shop" / "pricing.py"
    original = pricing.read_text()
    doc = open_doc(client, pricing, original)
    buffer = "def g(price):\n    gross = "
    uri = open_doc(client, repo / "shop" / "gross.py", buffer)
    assert (await inline(client, uri, end_of(buffer))).startswith("price * (1 + TAX_RATE)")
    changed = original.replace("gross = price * (1 + TAX_RATE)", "gross = price * (1 + TAX_RATE + SURCHARGE)")
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=doc, version=2),
        content_changes=[types.TextDocumentContentChangeWholeDocument(text=changed)]))
    pricing.write_text(changed)
    t0 = time.monotonic()
    client.text_document_did_save(types.DidSaveTextDocumentParams(
        text_document=types.TextDocumentIdentifier(uri=doc), text=changed))
    while True:
        text = await inline(client, uri, end_of(buffer))
        if "SURCHARGE" in text:
            break
        assert time.monotonic() - t0 < 5, "the save never became visible"
        await asyncio.sleep(0.01)


async def test_outside_change_seen_by_the_file_watcher(client: LanguageClient, repo: Path) -> None:
    await initialize(client, repo)
    await wait_ready(client)
    buffer = "def h():\n    outside_value = "
    uri = open_doc(client, repo / "shop" / "outside.py", buffer)
    assert "made_by_codegen" not in await inline(client, uri, end_of(buffer))
    generated = repo / "shop" / "generated"
    generated.mkdir()
    for i in range(30):  # a burst, as a checkout or a code generator makes
        (generated / f"gen_{i}.py").write_text(f"def g{i}():\n    outside_value = made_by_codegen({i})\n")
    deadline = time.monotonic() + 10
    while "made_by_codegen" not in (text := await inline(client, uri, end_of(buffer))):
        assert time.monotonic() < deadline, "the watcher never saw the new files"
        await asyncio.sleep(0.05)
    assert text.startswith("made_by_codegen(")
    for path in generated.iterdir():
        path.unlink()
    generated.rmdir()
    deadline = time.monotonic() + 10
    while "made_by_codegen" in await inline(client, uri, end_of(buffer)):
        assert time.monotonic() < deadline, "deleted files still complete"
        await asyncio.sleep(0.05)


async def test_shutdown_with_a_request_in_flight(
        client: LanguageClient, repo: Path, hole: Blackhole) -> None:
    # the backend would keep the request 300 s; shutdown must not wait for it (bounds are loose for busy CI)
    await initialize(client, repo, {"backend": {"name": "vllm", "vllm": {"endpoints": [hole.url]}, "timeoutS": 300},
                                    "server": {"requestTimeoutMs": 300_000}})
    uri = open_doc(client, repo / "shop" / "checkout.py", CHECKOUT)
    pending = asyncio.ensure_future(inline(client, uri, end_of(CHECKOUT)))
    await hole.wait_for(lambda h: h.opened >= 1)
    t0 = time.monotonic()
    await asyncio.wait_for(client.shutdown_async(None), 30)
    await asyncio.wait([pending], timeout=30)
    assert pending.done()
    client.exit(None)
    assert client._server is not None
    code = await asyncio.wait_for(client._server.wait(), 60)
    assert code == 0
    assert time.monotonic() - t0 < 60


@pytest.mark.vllm
@pytest.mark.slow
async def test_real_vllm_backend_completes_and_superseded_stream_is_aborted(
        client: LanguageClient, repo: Path, vllm_server) -> None:
    # Bounds are loose (tens of seconds): on 2 cores the CPU vLLM engine competes with this process and the server.
    options = {"backend": {"name": "vllm", "vllm": {"endpoints": [str(vllm_server)]}, "model": vllm_server.model,
                           "maxNewTokens": 8, "timeoutS": 120},
               "server": {"requestTimeoutMs": 120_000}}
    await initialize(client, repo, options)
    await wait_ready(client)
    uri = open_doc(client, repo / "shop" / "checkout.py", CHECKOUT)
    s0 = await stats(client)
    # the tiny random model writes noise; it must come from vLLM
    await asyncio.wait_for(inline(client, uri, end_of(CHECKOUT)), 150)
    s1 = await stats(client)
    assert len(s1["completed_ms"]) == len(s0["completed_ms"]) + 1 and s1["failed"] == s0["failed"]
    assert not [m for m in warnings(client) if "backend" in m], warnings(client)
    # a long generation superseded by a newer request: vLLM sees its stream go away and aborts it
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"repocomp": {
        **options, "backend": {**options["backend"], "maxNewTokens": 10000}}}))  # cannot end before the abort
    added, aborted = vllm_server.log_count("Added request"), vllm_server.log_count("Aborted request")
    first = asyncio.ensure_future(inline(client, uri, end_of(CHECKOUT)))
    await vllm_server.wait_for_log("Added request", added, 60, "the first request reached vLLM",
                                   still=lambda: not first.done())
    # one character to the left: not the first request plus typing, so the first generation cannot serve it
    moved = types.Position(line=end_of(CHECKOUT).line, character=end_of(CHECKOUT).character - 1)
    second = asyncio.ensure_future(inline(client, uri, moved))
    assert await asyncio.wait_for(first, 60) == ""
    await vllm_server.wait_for_log("Aborted request", aborted, 60, "vLLM aborted the superseded request")
    # a configuration change stops what is in flight (the old backend is closed): the second answers empty and
    # its generation is aborted too
    await vllm_server.wait_for_log("Added request", added + 1, 60, "the second request reached vLLM",
                                   still=lambda: not second.done())
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"repocomp": options}))
    assert await asyncio.wait_for(second, 60) == ""
    await vllm_server.wait_for_log("Aborted request", aborted + 1, 60, "vLLM aborted the second request")


@pytest.mark.slow
async def test_stats_report_the_in_process_models_prefix_reuse(
        client: LanguageClient, repo: Path, tiny_model_dir: Path) -> None:
    """`repocomp/stats` carries the in-process backend's prefix cache (what `bench typing --backend local` prints):
    a second request in the same document reuses the first one's computed prefix (the tiny random model, float32)."""
    options = {"backend": {"name": "transformers", "model": str(tiny_model_dir), "transformers": {"dtype": "float32"},
                           "maxNewTokens": 4, "timeoutS": 120},
               "server": {"requestTimeoutMs": 120_000}}
    await initialize(client, repo, options)
    await wait_ready(client)
    uri = open_doc(client, repo / "shop" / "checkout.py", CHECKOUT)
    await asyncio.wait_for(inline(client, uri, end_of(CHECKOUT)), 150)
    # one character to the left: not the first request plus typing (which the finished generation could serve)
    moved = types.Position(line=end_of(CHECKOUT).line, character=end_of(CHECKOUT).character - 1)
    await asyncio.wait_for(inline(client, uri, moved), 150)
    s = await stats(client)
    (cache,) = s["prefix_cache"]
    assert (cache["backend"], cache["model"], cache["dtype"]) == ("transformers", str(tiny_model_dir), "float32")
    assert s["failed"] == 0 and cache["hits"] >= 1 and cache["reused_tokens"] > 0, s
    assert cache["requests"] >= 2 and cache["prefilled_tokens"] > 0 and 0 < cache["hit_rate"] <= 1, cache


async def test_typing_the_first_character_of_an_answer_at_an_empty_indented_line_is_served_from_it(
        client: LanguageClient, repo: Path) -> None:
    """A model that reads the indentation as a token begins its answer with the space its token carries: the
    editor is shown `return a` (not a doubled blank, which Python reads as another block), and typing its `r`
    is served the rest from the same generation, with no new one (though the buffer reached the index between)."""
    from lsp_bench.slow_backend import SlowBackend

    slow = SlowBackend("def scale(a):\n     return a * 2\n", latency_s=0.2)  # answers " return a * 2"
    await initialize(client, repo, {"backend": {"name": "vllm", "vllm": {"endpoints": [slow.start()]}, "model": "slow",
                                                "timeoutS": 30}})
    try:
        await wait_ready(client)
        version = await folder_version(client, repo)
        uri = open_doc(client, repo / "shop" / "scale.py", "def scale(a):\n    ")
        assert await inline(client, uri, types.Position(line=1, character=4)) == "return a * 2"
        assert await wait_version(client, repo, version) > version  # the buffer reached the index meanwhile
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[types.TextDocumentContentChangePartial(
                range=types.Range(start=types.Position(line=1, character=4), end=types.Position(line=1, character=4)),
                text="r")]))
        assert await inline(client, uri, types.Position(line=1, character=5)) == "eturn a * 2"
        assert (await stats(client))["generations"] == {"started": 1, "reused": 1, "skipped": 0}
    finally:
        slow.stop()


async def test_an_editor_that_sends_no_prefetch_gets_one_where_its_edits_paused(
        client: LanguageClient, repo: Path) -> None:
    """No `repocomp/prefetch` from the editor (eglot, Helix): once its edits pause, the line the last one ended on is
    prefetched, and the request there shows that context without retrieving again; once the editor sends its own
    prefetch, edits start none."""
    await initialize(client, repo)
    await wait_ready(client)
    uri = open_doc(client, repo / "shop" / "again.py", "def report_again(order):\n    summary = describe_order(order)\n")

    def type_at(line: int, character: int, text: str, version: int) -> None:
        at = types.Position(line=line, character=character)
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangePartial(range=types.Range(start=at, end=at), text=text)]))

    type_at(2, 0, "    ", 2)
    deadline = time.monotonic() + 30
    while (await stats(client))["prefetches"]["done"] < 1:
        assert time.monotonic() < deadline, "no prefetch after the edits paused"
        await asyncio.sleep(0.05)
    assert (await stats(client))["prefetches"]["after_edits"] == 1
    await inline(client, uri, types.Position(line=2, character=4))
    stages = (await stats(client))["completed_stages"][-1]
    # the prefetch's context again, its last round's: nothing retrieved, only that round run
    assert "prompt_2" in stages and not any(k.startswith(("retrieve", "prompt_1")) for k in stages), stages

    client.protocol.notify("repocomp/prefetch", {"textDocument": {"uri": uri}, "position": {"line": 2, "character": 4}})
    while (await stats(client))["prefetches"]["done"] < 2:
        assert time.monotonic() < deadline, "the editor's prefetch never finished"
        await asyncio.sleep(0.05)
    type_at(2, 4, "total = 0", 3)
    await asyncio.sleep(1.5)  # three pauses' length
    prefetches = (await stats(client))["prefetches"]
    assert prefetches["after_edits"] == 1 and prefetches["done"] == 2


async def test_a_prefetch_lays_the_context_a_request_on_the_line_opened_below_shows(
        client: LanguageClient, repo: Path) -> None:
    """`repocomp/prefetch` where the cursor rests: the server lays that line's context in the background (with the
    extractive backend nothing is computed ahead), and the request on the line opened below shows it without
    retrieving again; a prefetch of another shape is said once and changes nothing."""
    await initialize(client, repo)
    await wait_ready(client)
    buffer = "def report_again(order):\n    summary = describe_order(order)\n"
    uri = open_doc(client, repo / "shop" / "again.py", buffer)
    client.protocol.notify("repocomp/prefetch", {"textDocument": {"uri": uri}, "position": {"line": 1, "character": 4}})
    deadline = time.monotonic() + 30
    while (await stats(client))["prefetches"]["done"] < 1:
        assert time.monotonic() < deadline, "the prefetch never finished"
        await asyncio.sleep(0.05)
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
        content_changes=[types.TextDocumentContentChangePartial(
            range=types.Range(start=types.Position(line=2, character=0), end=types.Position(line=2, character=0)),
            text="    ")]))
    await inline(client, uri, types.Position(line=2, character=4))
    stages = (await stats(client))["completed_stages"][-1]
    # the prefetch's context again, its last round's: nothing retrieved, only that round run
    assert "prompt_2" in stages and not any(k.startswith(("retrieve", "prompt_1")) for k in stages), stages

    client.protocol.notify("repocomp/prefetch", {"textDocument": uri, "line": 1})
    deadline = time.monotonic() + 10
    while not any("repocomp/prefetch" in m for m in warnings(client)):
        assert time.monotonic() < deadline, "a malformed prefetch was not said"
        await asyncio.sleep(0.05)
    assert (await stats(client))["prefetches"]["done"] == 1
