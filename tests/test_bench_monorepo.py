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
