"""Unit tests of lsp_server.convert and lsp_server.options (no server process)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from lsprotocol import types

from lsp_server import convert
from lsp_server.options import Options, apply_options, parse_options
from repocomp.config.schema import Config

LINE = '    s = "价格🙂x" + fmt'  # CJK (1 UTF-16 unit each, 3 UTF-8 bytes) and an emoji (2 UTF-16 units, 4 bytes)


def test_utf16_columns_round_trip_over_cjk_and_emoji() -> None:
    # str index -> UTF-16 units: each CJK char is 1 unit, the emoji 2
    i_emoji = LINE.index("🙂")
    assert convert.index_to_client_col(LINE, i_emoji) == i_emoji
    assert convert.index_to_client_col(LINE, i_emoji + 1) == i_emoji + 2
    assert convert.index_to_client_col(LINE, len(LINE)) == len(LINE) + 1
    for i in range(len(LINE) + 1):
        assert convert.client_col_to_index(LINE, convert.index_to_client_col(LINE, i)) == i
    # a column inside the surrogate pair lands after the emoji; past the end means the end (LSP spec)
    assert convert.client_col_to_index(LINE, i_emoji + 1) == i_emoji + 1
    assert convert.client_col_to_index(LINE, 10_000) == len(LINE)


def test_utf8_and_utf32_columns() -> None:
    i_x = LINE.index("x")
    assert convert.index_to_client_col(LINE, i_x, convert.UTF8) == len(LINE[:i_x].encode("utf-8"))
    assert convert.client_col_to_index(LINE, len(LINE[:i_x].encode("utf-8")), convert.UTF8) == i_x
    assert convert.index_to_client_col(LINE, i_x, convert.UTF32) == i_x
    assert convert.normalize_encoding(types.PositionEncodingKind.Utf8) == convert.UTF8
    assert convert.normalize_encoding(None) == convert.UTF16


def test_to_cursor_normalizes_line_breaks_and_rejects_bad_input() -> None:
    text = "x = 1\r\n" + LINE + "\r\n"
    cut = convert.to_cursor(text, types.Position(line=1, character=len(LINE) + 1), convert.UTF16, 10_000)
    assert (cut.line, cut.col) == (1, len(LINE))
    assert cut.text == "x = 1\n" + LINE + "\n"
    assert (cut.before, cut.after) == ("x = 1\n" + LINE, "\n")
    kinds = {}
    for name, args in {
        "position": (text, types.Position(line=3, character=0), convert.UTF16, 10_000),
        "binary": ("a\x00b", types.Position(line=0, character=0), convert.UTF16, 10_000),
        "huge": ("x" * 101, types.Position(line=0, character=0), convert.UTF16, 100),
    }.items():
        with pytest.raises(convert.ConversionError) as exc:
            convert.to_cursor(*args)
        kinds[name] = exc.value.kind
    assert kinds == {"position": "position", "binary": "binary", "huge": "huge"}


def test_a_request_is_resolved_once_from_the_lsp_request(tmp_path: Path) -> None:
    """The request's document key, file, folder and path there, and the cut, read by every later step."""
    from lsp_server.request import CompletionRequest
    from lsp_server.workspace_index import WorkspaceIndexes

    folder = tmp_path / "my repo"
    (folder / "pkg").mkdir(parents=True)
    indexes = WorkspaceIndexes()
    indexes.add_folder(folder, Config())
    uri = (folder / "pkg" / "a.py").as_uri()
    assert "%20" in uri
    request = CompletionRequest.build(uri, "x = 1\ny = ", 3, types.Position(line=1, character=4), convert.UTF16,
                                      10_000, indexes)
    assert request.key == convert.document_key(uri) and request.path == folder / "pkg" / "a.py"
    assert request.folder is not None and request.root == folder.resolve() and request.rel == "pkg/a.py"
    assert (request.cut.before, request.cut.after, request.version) == ("x = 1\ny = ", "", 3)
    assert (request.engine_path(True), request.engine_path(False)) == ("pkg/a.py", "a.py")
    outside = CompletionRequest.build((tmp_path / "b.py").as_uri(), "", None, types.Position(line=0, character=0),
                                      convert.UTF16, 10_000, indexes)
    assert (outside.folder, outside.rel, outside.index_stamp, outside.index_ready, outside.engine_path(True)) == \
        (None, None, None, False, "b.py")
    with pytest.raises(convert.ConversionError) as exc:  # the scheme is checked before the text
        CompletionRequest.build("untitled:Untitled-1", "a\x00b", 1, types.Position(line=0, character=0),
                                convert.UTF16, 10_000, indexes)
    assert exc.value.kind == "scheme"
    indexes.close()


def test_uri_to_path_decodes_percent_escapes() -> None:
    assert convert.uri_to_path("file:///tmp/a%20b/c%C3%A9.py") == Path("/tmp/a b/cé.py")
    assert convert.uri_to_path(convert.path_to_uri(Path("/tmp/x y.py"))) == Path("/tmp/x y.py")
    # a name that is not UTF-8 (byte 0xff): the path on disk, not U+FFFD
    assert os.fsencode(convert.uri_to_path("file:///tmp/a%FFb/x.py")) == b"/tmp/a\xffb/x.py"
    weird = Path(os.fsdecode(b"/tmp/caf\xe9 dir/x.py"))
    assert convert.uri_to_path(convert.path_to_uri(weird)) == weird


def test_completion_item_replaces_the_word_prefix_in_utf16_units() -> None:
    line = '    return "价格 🙂 " + format_pr'
    pos = types.Position(line=7, character=len(line.encode("utf-16-le")) // 2)
    result = convert.to_completion_list("ice(price)\n    x = 1", line, pos, convert.UTF16)
    (item,) = result.items
    edit = item.text_edit
    assert isinstance(edit, types.TextEdit)
    start = line.index("format_pr")
    assert edit.range.start == types.Position(line=7, character=start + 1)  # +1: the emoji's second unit
    assert edit.range.end == pos
    assert edit.new_text == "format_price(price)\n    x = 1"
    assert item.filter_text == "format_price(price)"
    assert item.label == "format_price(price)"
    assert convert.to_completion_list("  \n", line, pos, convert.UTF16).items == []


def test_inline_item_inserts_at_the_cursor() -> None:
    pos = types.Position(line=2, character=5)
    (item,) = convert.to_inline_completion_list("foo()", pos).items
    assert item.insert_text == "foo()" and item.range == types.Range(start=pos, end=pos)
    assert convert.to_inline_completion_list("", pos).items == []


def test_options_invalid_values_are_reported_and_replaced_by_defaults() -> None:
    opts, errors = parse_options({"repocomp": {
        "enable": "yes",
        "backend": {"name": "gpt", "vllm": {"endpoints": "http://127.0.0.1:9"}, "maxNewTokens": 32,
                    "timeoutS": "soon"},
        "retrieval": {"alpha": -1, "iterations": 3, "colour": 1},
        "prompt": {"maxTokens": 512, "fim": "codellama"},
        "server": {"requestTimeoutMs": 0, "debounceMs": 40},
        "colour": "blue",
    }})
    assert opts.enable is True  # "yes" is not a bool
    # read with the config's converter: types and names now, the config's rules when applied to a folder
    assert opts.engine["backend"] == {"name": "gpt", "vllm": {"endpoints": ("http://127.0.0.1:9",)},
                                      "max_new_tokens": 32}
    assert opts.engine["retrieval"] == {"alpha": -1.0, "iterations": 3}
    assert opts.server.request_timeout_ms == Options().server.request_timeout_ms and opts.server.debounce_ms == 40
    assert len(errors) == 5, errors
    assert any("'colour'" in e for e in errors) and any("retrieval.colour" in e for e in errors)
    assert any("backend.timeout_s" in e and "number" in e for e in errors)
    assert any("server.request_timeout_ms" in e and "1..86400000" in e for e in errors)
    config, errs = apply_options(Config(), opts)
    # one table of rules: the config's (`name must be one of ...`, `alpha must be in [0, 1000]`)
    assert len(errs) == 2 and any("backend.name" in e and "must be one of" in e for e in errs), errs
    assert any("retrieval.alpha" in e and "[0, 1000]" in e for e in errs), errs
    assert config.backend.name == Config().backend.name
    assert config.backend.vllm.endpoints == ("http://127.0.0.1:9",) and config.backend.max_new_tokens == 32
    assert config.retrieval.iterations == 3 and config.retrieval.alpha == Config().retrieval.alpha
    assert config.prompt.max_tokens == 512 and config.prompt.context_tokens <= 512 and config.prompt.fim == "codellama"


def test_options_reach_every_key_of_the_engine_sections() -> None:
    """The server's options are the config's sections: a key the old hand-written schema lacked works too."""
    opts, errors = parse_options({"backend": {"vllm": {"connectTimeoutS": 1.5}, "fallback": ""},
                                  "memory": {"enabled": True},
                                  "retrieval": {"queryRelations": 0.25}, "prompt": {"context_tokens": 300}})
    assert errors == []
    config, errs = apply_options(Config(), opts)
    assert errs == [] and config.backend.vllm.connect_timeout_s == 1.5 and config.backend.fallback == ""
    assert config.retrieval.query_relations == 0.25 and config.prompt.context_tokens == 300
    assert config.memory.enabled


def test_options_none_keeps_the_workspace_config() -> None:
    base = Config().replace("retrieval", alpha=0.3)
    opts, errors = parse_options(None)
    assert errors == [] and opts == Options()
    assert apply_options(base, opts) == (base, [])
