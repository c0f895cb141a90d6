"""Hostile input, round two, items 5 to 7 for text and sizes: names and buffers that are not valid UTF-8, a
document grown by incremental changes, eval tasks with absurd line numbers.

- A file name with byte 0xff (Python: the surrogateescape character U+DCFF) and a buffer holding a lone surrogate
  (U+D800, as an editor's JSON `"\\ud800"` delivers it) are shown with escapes (`\\xff`, `\\ud800`) on a UTF-8
  terminal, never a traceback or bytes that are not UTF-8; a prompt holding them reaches a vLLM endpoint as valid
  UTF-8 JSON (a loopback server here records the body) instead of an internal error and an empty answer.
- A document past `server.maxDocumentBytes` through `didChange` appends is dropped with one showMessage, and the
  server's memory stays flat while the server keeps answering (pygls grew it to 432 MB).
- An eval task whose lines lie past its file's end is an error record; the run goes on with the other tasks.

The CLI runs as a subprocess (its own locale and stdout encoding), the server is the real one over stdio.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cli_run import REPO_ROOT, TIMEOUT_S, assert_one_line, cli, user_env
from lsp_helpers import (
    end_of,
    initialize,
    inline,
    open_doc,
    stats,
    wait_ready,
    warnings,
)
from lsprotocol import types
from pytest_lsp import LanguageClient

NAME = os.fsdecode(b"caf\xff.py")  # what os.listdir gives for the file name b"caf\xff.py": "caf\udcff.py"
SHOWN = "caf\\xff.py"  # how repocomp shows it
HELPER = "def helper_total(x):\n    return x + 1\n\n\nvalue = helper_total(2)\n"
MAIN = "import os\n\n\ndef main():\n    return helper_total("
ANSWER = "x) * 2"  # the recording endpoint's completion


# ----- a loopback OpenAI-style endpoint that records what it is sent ------------------------------------------

class RecordingEndpoint:
    """`/v1/completions` answering ANSWER as a server-sent event stream; `bodies` holds each request body as
    received (bytes). Runs in a thread, so a subprocess can be pointed at it."""

    def __init__(self) -> None:
        bodies: list[bytes] = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                bodies.append(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                event = json.dumps({"choices": [{"text": ANSWER}]})
                self.wfile.write(f"data: {event}\n\ndata: [DONE]\n\n".encode())

            def log_message(self, *args: Any) -> None:
                pass

        self.bodies = bodies
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def prompts(self) -> list[str]:
        """The prompts received; each body must be UTF-8 JSON (what a real vLLM server parses)."""
        return [json.loads(body.decode("utf-8"))["prompt"] for body in self.bodies]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def endpoint() -> Iterator[RecordingEndpoint]:
    server = RecordingEndpoint()
    yield server
    server.close()


# ----- the CLI on a UTF-8 terminal ------------------------------------------------------------------------------

# C.UTF-8 as a terminal has it (Python writes undecodable bytes raw there), and a strict UTF-8 stdout (as under
# en_US.UTF-8, where the same text raised UnicodeEncodeError)
TERMINALS = {"C.UTF-8": {"LANG": "C.UTF-8"}, "strict": {"LANG": "C.UTF-8", "PYTHONIOENCODING": "utf-8:strict"}}


def run_cli(home: Path, terminal: str, *args: str) -> tuple[int, str, str]:
    """`python -m repocomp ARGS` on that terminal; stdout and stderr must be UTF-8 and hold no traceback."""
    env = {k: v for k, v in user_env(home).items() if k not in ("PYTHONIOENCODING", "LC_ALL", "LC_CTYPE")}
    env.update(TERMINALS[terminal])
    proc = subprocess.run([sys.executable, "-m", "repocomp", *args], capture_output=True, timeout=TIMEOUT_S,
                          cwd=REPO_ROOT, env=env)
    out, err = proc.stdout.decode("utf-8"), proc.stderr.decode("utf-8")  # UnicodeDecodeError: not UTF-8
    assert "Traceback" not in err, err
    return proc.returncode, out, err


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository whose helper lives in a file named b"caf\\xff.py", with a second undecodable name that the
    index summary lists (a file of binary content)."""
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / NAME).write_text(HELPER)
    (root / "main.py").write_text(MAIN)
    (root / os.fsdecode(b"bin\xfe.py")).write_bytes(b"\x00\x01binary\x00" * 10)
    return root


@pytest.mark.parametrize("terminal", TERMINALS)
def test_index_and_explain_show_an_undecodable_file_name_escaped(repo: Path, tmp_path: Path,
                                                                 terminal: str) -> None:
    status, out, _ = run_cli(tmp_path, terminal, "index", str(repo))
    assert status == 0 and "files              2" in out, out
    assert "bin\\xfe.py: binary" in out, out  # the skipped file, named with an escape

    status, out, err = run_cli(tmp_path, terminal, "complete", "--explain", "--backend", "extractive",
                               f"{repo / 'main.py'}:5")
    assert status == 0, err
    assert f"helper_total (function)  {SHOWN}:1" in out, out  # the definition, from the undecodable file
    assert f"{SHOWN}:1-" in out  # a retrieved fragment of it
    assert out.rstrip().endswith("x):"), out  # the extractive continuation, from that file

    # the cursor in the file with the undecodable name (argv carries the byte, as a shell passes it)
    status, out, err = run_cli(tmp_path, terminal, "complete", "--explain", "--backend", "extractive",
                               f"{repo / NAME}:5:16")
    assert status == 0 and "-- completion --" in out, err

    # the stored index holds the name as it is on disk (its JSON header escapes it) and reads it back
    status, out, _ = run_cli(tmp_path, terminal, "complete", "--json", "--backend", "extractive",
                             f"{repo / 'main.py'}:5")
    assert status == 0 and NAME in {b["path"] for b in json.loads(out)["context"]}
    code = ("import sys; from repocomp.index import Index; index = Index.open(sys.argv[1], build=False); "
            "import json; print(json.dumps([sorted(index.files), index.files[sys.argv[2]].text]))")
    proc = subprocess.run([sys.executable, "-c", code, str(repo), NAME], capture_output=True, text=True,
                          timeout=TIMEOUT_S, cwd=REPO_ROOT, env=user_env(tmp_path))
    assert json.loads(proc.stdout) == [sorted([NAME, "main.py"]), HELPER], proc.stderr


@pytest.mark.parametrize("terminal", TERMINALS)
def test_vllm_gets_a_utf8_prompt_naming_an_undecodable_file(repo: Path, tmp_path: Path, endpoint: RecordingEndpoint,
                                                             terminal: str) -> None:
    config = tmp_path / "vllm.toml"  # the user's --config: a loopback endpoint, no fallback to hide a failure
    config.write_text(f'[backend]\nname = "vllm"\nmodel = "m"\nfallback = ""\ntimeout_s = 20\n'
                      f'[backend.vllm]\nendpoints = ["{endpoint.url}"]\n')
    status, out, err = run_cli(tmp_path, terminal, "complete", "--config", str(config), "--iterations", "1",
                               f"{repo / 'main.py'}:5")
    assert status == 0, err
    assert out == ANSWER + "\n" and "completed by the vllm backend" in err, (out, err)
    [prompt] = endpoint.prompts()
    assert f"# {SHOWN}\n" in prompt and "def helper_total(x):" in prompt, prompt


def test_a_model_tokenizer_counts_a_prompt_naming_an_undecodable_file(repo: Path, tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "def": 1, "return": 2}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    (repo / "tok").mkdir()
    tok.save(str(repo / "tok" / "tokenizer.json"))
    config = tmp_path / "tokenizer.toml"  # the tokenizers library refuses a str holding a lone surrogate
    config.write_text(f'[prompt]\ntokenizer = "{repo / "tok"}"\n')
    status, out, err = run_cli(tmp_path, "C.UTF-8", "complete", "--explain", "--backend", "extractive",
                               "--config", str(config), f"{repo / 'main.py'}:5")
    assert status == 0 and f"{SHOWN}:1-" in out, err


# ----- the server: a buffer holding a lone surrogate, a document grown past the limit --------------------------


REQUEST_BOUND_S = 10.0


async def test_a_lone_surrogate_in_a_buffer_reaches_vllm_escaped(client: LanguageClient, tmp_path: Path,
                                                                 endpoint: RecordingEndpoint) -> None:
    root = tmp_path / "plain"
    (root / ".git").mkdir(parents=True)
    (root / "helpers.py").write_text(HELPER)
    options = {"backend": {"name": "vllm", "vllm": {"endpoints": [endpoint.url]}, "model": "m", "timeoutS": 20},
               "retrieval": {"iterations": 1}}
    await initialize(client, root, options)
    await wait_ready(client, timeout=30)
    text = "label = 'caf\ud800'\n" + MAIN  # the client's JSON carries "\ud800"
    uri = open_doc(client, root / "main.py", text)
    answer = await asyncio.wait_for(inline(client, uri, end_of(text)), REQUEST_BOUND_S)
    assert answer == ANSWER, (answer, warnings(client))
    [prompt] = endpoint.prompts()
    assert "label = 'caf\\ud800'" in prompt
    assert not [w for w in warnings(client) if "internal" in w], warnings(client)


MIB = 1 << 20


async def test_a_document_grown_by_appends_past_the_limit_is_dropped_and_memory_stays_flat(
        client: LanguageClient, tmp_path: Path, record_property) -> None:
    root = tmp_path / "plain"
    (root / ".git").mkdir(parents=True)
    (root / "helpers.py").write_text(HELPER)
    await initialize(client, root, {"backend": {"name": "extractive"}})  # the default limit: 1,000,000 bytes
    await wait_ready(client, timeout=30)
    before = (await stats(client))["rss_bytes"]

    uri = open_doc(client, root / "big.py", "x = 1\n")
    chunk = "# " + "y" * (MIB - 3) + "\n"  # 1 MiB a message, as the reported client appended
    end = types.Position(line=1, character=0)
    for version in range(2, 2 + 96):  # 96 MiB appended; pygls kept all of it
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangePartial(range=types.Range(start=end, end=end),
                                                                    text=chunk)]))
        end = types.Position(line=end.line + 1, character=0)
    after = await asyncio.wait_for(stats(client), REQUEST_BOUND_S)  # answered after every change was handled
    growth_mb = (after["rss_bytes"] - before) / MIB
    record_property("rss_growth_mb_after_96_mib_appended", round(growth_mb))
    # docs/security.md: +0 MB; kept whole, the document alone would be 96 MiB. The bound: a few messages' worth
    assert growth_mb < 8, growth_mb

    huge = [w for w in warnings(client) if "larger than 1000000 bytes" in w]
    assert len(huge) == 1 and "big.py" in huge[0], warnings(client)
    # completing in it answers, empty, with no second message; another document still completes
    assert await asyncio.wait_for(inline(client, uri, types.Position(line=0, character=5)), REQUEST_BOUND_S) == ""
    small = "from helpers import helper_total\n\n\nvalue = "
    other = open_doc(client, root / "main.py", small)
    assert "helper_total(2)" in await asyncio.wait_for(inline(client, other, end_of(small)), REQUEST_BOUND_S)
    assert len(warnings(client)) == 1, warnings(client)

    # reopened smaller, it is followed and completed again
    client.text_document_did_close(types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(uri=uri)))
    open_doc(client, root / "big.py", small, version=200)
    assert "helper_total(2)" in await asyncio.wait_for(inline(client, uri, end_of(small)), REQUEST_BOUND_S)


async def test_documents_past_the_limit_in_one_message_are_not_kept(client: LanguageClient, tmp_path: Path,
                                                                    record_property) -> None:
    root = tmp_path / "plain"
    (root / ".git").mkdir(parents=True)
    (root / "helpers.py").write_text(HELPER)
    await initialize(client, root, {"backend": {"name": "extractive"}, "server": {"maxDocumentBytes": 100_000}})
    await wait_ready(client, timeout=30)
    before = (await stats(client))["rss_bytes"]
    small = "from helpers import helper_total\n\n\nvalue = "

    # one message of many small changes (multi-byte text: counted in bytes), a whole-document replacement,
    # an open: 24 MiB each (messages are bounded at 64 MiB), kept whole by pygls
    grown = open_doc(client, root / "grown.py", small)
    start = types.Position(line=0, character=0)
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=grown, version=2),
        content_changes=[types.TextDocumentContentChangePartial(range=types.Range(start=start, end=start),
                                                                text="# \u00e9" * (32 * 1024) + "\n")
                         for _ in range(192)]))
    whole = open_doc(client, root / "whole.py", small)
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=whole, version=2),
        content_changes=[types.TextDocumentContentChangeWholeDocument(text="# \u20ac\n" * (4 * MIB) + small)]))
    opened = open_doc(client, root / "opened.py", "# " + "z" * (24 * MIB) + "\n" + small)
    after = await asyncio.wait_for(stats(client), 3 * REQUEST_BOUND_S)
    growth_mb = (after["rss_bytes"] - before) / MIB
    record_property("rss_growth_mb_after_3x24_mib_documents", round(growth_mb))
    assert growth_mb < 48, growth_mb  # kept, the three are 72 MiB (one message may linger in the allocator)

    for uri in (grown, whole, opened):
        assert await asyncio.wait_for(inline(client, uri, end_of(small)), REQUEST_BOUND_S) == ""
    assert [w for w in warnings(client) if "larger than 100000 bytes" in w], warnings(client)
    assert len(warnings(client)) == 1, warnings(client)  # one message for the kind
    kept = open_doc(client, root / "main.py", small)
    assert "helper_total(2)" in await asyncio.wait_for(inline(client, kept, end_of(small)), REQUEST_BOUND_S)


# ----- eval tasks whose lines lie outside their file -------------------------------------------------------------

LINES = [f"value_{i} = {i}" for i in range(12)]


def _task(task_id: str, path: str, line_no: int, start: int = 0) -> dict[str, Any]:
    md = {"task_id": task_id, "ground_truth": LINES[6], "fpath_tuple": ["r", path], "context_start_lineno": start,
          "line_no": line_no}
    return {"prompt": "\n".join(LINES[:6]) + "\n", "metadata": md}


@pytest.mark.parametrize("absurd", [
    {"line_no": 10**12, "start": 10**12 - 6},  # the padding of 10**12 lines above the context: MemoryError
    {"line_no": 10**12, "start": 0},
    {"line_no": 13, "start": 13},  # one past the end
])
def test_an_eval_task_past_its_files_end_is_an_error_record_and_the_run_goes_on(tmp_path: Path, capsys,
                                                                                monkeypatch, absurd) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    repo = tmp_path / "repos" / "r"
    repo.mkdir(parents=True)
    (repo / "values.py").write_text("\n".join(LINES) + "\n")
    (repo / "other.py").write_text("\n".join(LINES) + "\n")
    tasks = [_task("good", "values.py", 6), _task("absurd", "values.py", absurd["line_no"], absurd["start"]),
             _task("other", "other.py", 6)]
    tasks_file = tmp_path / "tasks.jsonl"
    tasks_file.write_text("".join(json.dumps(t) + "\n" for t in tasks))
    out = tmp_path / "results.jsonl"
    status, stdout, err = cli(capsys, "eval", str(tasks_file), "--repos", str(tmp_path / "repos"), "--backend",
                              "extractive", "--mode", "vanilla", "--out", str(out))
    assert status == 1 and "1 task(s) failed" in err, err
    assert json.loads(stdout)["tasks"] == 2
    records = {r["task_id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert set(records) == {"good", "absurd", "other"}
    assert records["absurd"]["em"] is None and "past the end of the file (12 lines)" in records["absurd"]["error"]
    assert all("error" not in records[t] and records[t]["em"] == 1.0 for t in ("good", "other")), records


@pytest.mark.parametrize("position, needle", [
    ("9" * 5000, "is not FILE:LINE"),  # int() refuses past 4,300 digits: a ValueError traceback
    ("5:" + "9" * 30, "is not FILE:LINE"),
])
def test_complete_at_an_absurd_line_or_column_is_one_line(repo: Path, tmp_path: Path, capsys, monkeypatch,
                                                          position: str, needle: str) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    status, _, err = cli(capsys, "complete", "--backend", "extractive", f"{repo / 'main.py'}:{position}")
    assert len(assert_one_line(status, err, needle)) < 400


# ----- task files read in memory proportional to their size, each task bounded -----------------------------------

_UNDER_A_CAP = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))  # a container's address-space cap
from repocomp.cli import main
code = main(sys.argv[1:])
# VmHWM: this program's own peak (ru_maxrss would carry the forking test process's over the exec)
hwm = next(ln for ln in open("/proc/self/status") if ln.startswith("VmHWM:"))
print("peak_rss_kb", hwm.split()[1], file=sys.stderr)
sys.exit(code)
"""


def _eval_under_a_cap(tmp_path: Path, tasks_file: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    return subprocess.run([sys.executable, "-c", _UNDER_A_CAP, "eval", str(tasks_file), "--repos",
                           str(tmp_path / "repos"), "--backend", "extractive", "--mode", "vanilla", "--out",
                           str(tmp_path / "out.jsonl"), "--no-progress"],
                          capture_output=True, text=True, env=env, timeout=300)


def _peak_mb(stderr: str) -> float:
    return int(stderr.rsplit("peak_rss_kb ", 1)[1].split()[0]) / 1024


def test_a_small_task_file_evaluates_under_an_address_space_cap(tmp_path: Path) -> None:
    """A buffer of the whole bound (4 GiB) was allocated for any task file: a MemoryError traceback under 3 GiB."""
    repo = tmp_path / "repos" / "r"
    repo.mkdir(parents=True)
    (repo / "values.py").write_text("\n".join(LINES) + "\n")
    tasks_file = tmp_path / "tasks.jsonl"
    tasks_file.write_text("".join(json.dumps(_task(f"t{i}", "values.py", 6)) + "\n" for i in range(2)))
    proc = _eval_under_a_cap(tmp_path, tasks_file)
    assert proc.returncode == 0 and "MemoryError" not in proc.stderr, proc.stderr[-2000:]
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 2


def test_an_absurd_task_is_one_line_in_bounded_memory(tmp_path: Path) -> None:
    (tmp_path / "repos" / "r").mkdir(parents=True)
    huge = _task("huge", "values.py", 6)
    huge["prompt"] = "x = 1\n" * ((256 << 20) // 6)  # a 256 MiB prompt: read whole, it took over a GB
    tasks_file = tmp_path / "tasks.jsonl"
    tasks_file.write_text(json.dumps(_task("fine", "values.py", 6)) + "\n" + json.dumps(huge) + "\n")
    del huge
    proc = _eval_under_a_cap(tmp_path, tasks_file)
    errors = [ln for ln in proc.stderr.splitlines() if "error" in ln.lower()]
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert any("tasks.jsonl:2: a task longer than 16 MiB" in ln for ln in errors), proc.stderr[-2000:]
    # the engine's imports (about 420 MB) and one bounded line, not the task
    assert _peak_mb(proc.stderr) < 600, proc.stderr[-500:]
