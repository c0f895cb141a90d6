"""`repocomp bench monorepo`: a large repository assembled from real source folders, for `bench index`."""

from __future__ import annotations

from pathlib import Path

from repocomp.cli import main


def test_assembles_the_indexable_sources_of_each_folder_apart(tmp_path: Path, capsys) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    (one / "pkg").mkdir(parents=True)
    (one / "pkg" / "a.py").write_text("x = 1\ny = 2\n")
    (one / "notes.txt").write_text("not source\n")
    (one / ".git").mkdir()
    (one / ".git" / "hook.py").write_text("hidden = 1\n")
    (one / "link.py").symlink_to(one / "pkg" / "a.py")
    (two / "src").mkdir(parents=True)
    (two / "src" / "main.rs").write_text("fn main() {}\n")
    (two / "pkg").mkdir()
    (two / "pkg" / "a.py").write_text("z = 3\n")  # the same path as in `one`: each folder keeps its own
    out = tmp_path / "mono"

    assert main(["bench", "monorepo", str(out), "--from", str(one), "--from", str(two)]) == 0
    copied = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert copied == ["00-one/pkg/a.py", "01-two/pkg/a.py", "01-two/src/main.rs"]
    assert "3 files, 4 lines from 2 folders" in capsys.readouterr().out

    assert main(["bench", "monorepo", str(out), "--from", str(one)]) == 2  # never into a folder in use
    assert "not an empty folder" in capsys.readouterr().err


def test_bench_index_loaded_says_what_each_part_of_a_stored_index_takes(tmp_path: Path, capsys) -> None:
    import json
    import shutil

    repo = tmp_path / "repo"
    shutil.copytree(Path(__file__).parent.parent / "fixtures" / "index_repo", repo)
    for k in range(8):  # under [index] max_file_bytes each
        (repo / f"big{k}.py").write_text("".join(f"def f{k}_{i}(x):\n    return x + {i} * 'v{k}{i}'\n"
                                                 for i in range(5_000)))
    assert main(["index", str(repo)]) == 0
    capsys.readouterr()
    stored = (repo / ".repocomp" / "index.bin").read_bytes()
    assert main(["bench", "index", str(repo), "--loaded", "--updates", "3", "--json"]) == 0
    mem = json.loads(capsys.readouterr().out)
    parts = mem["parts_mb"]
    assert list(parts) == ["term index", "relations (W, its node tables)", "resolver", "graph", "fragments",
                           "parsed files", "file texts and tables"]
    assert mem["loaded_mb"] > 1 and sum(parts.values()) <= mem["loaded_mb"] + 1
    # the whole process (the interpreter too) after loading, editing and saving beside the repository's index
    assert mem["loaded_rss_mb"] > mem["loaded_mb"] and mem["edited_rss_mb"] > 0 and mem["saved_rss_mb"] > 0
    assert mem["load_s"] > 0 and mem["save_s"] > 0 and mem["load_peak_mb"] >= mem["loaded_rss_mb"] - 1
    assert mem["save_peak_mb"] >= mem["saved_rss_mb"] - 1
    assert mem["prepare_s"] > 0
    assert (repo / ".repocomp" / "index.bin").read_bytes() == stored


def test_bench_index_says_a_builds_peak_per_character_beside_the_admission_rule(tmp_path: Path, capsys) -> None:
    """What `[index] max_memory_mb` assumes is re-measured with this figure: the build's peak RSS over the
    characters it indexed."""
    import json

    from repocomp.config.schema import INDEX_BYTES_PER_SOURCE_CHAR

    repo = tmp_path / "repo"
    repo.mkdir()
    texts = [f"def f{i}(x):\n    return x * {i}\n" * 50 for i in range(6)]
    for i, text in enumerate(texts):
        (repo / f"m{i}.py").write_text(text)
    assert main(["bench", "index", str(repo), "--runs", "1", "--updates", "0", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["chars"] == sum(len(t) for t in texts) and result["warnings"] == []
    assert result["peak_bytes_per_char"] == result["peak_rss_mb_max"] * 2**20 / result["chars"]
    assert result["admission_bytes_per_char"] == INDEX_BYTES_PER_SOURCE_CHAR
    assert main(["bench", "index", str(repo), "--runs", "1", "--updates", "0"]) == 0
    out = capsys.readouterr().out
    assert "peak per character " in out and f"({result['chars']:,} characters)" in out
    assert f"admits source at {INDEX_BYTES_PER_SOURCE_CHAR} B per character" in out
