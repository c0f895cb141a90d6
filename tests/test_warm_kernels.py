"""The server's build thread readies the index's numba kernels before a loaded index's first edit and request need them:
compiled inside that edit (under the index's write lock) they made a keystroke wait 1.9 s on the first run after an
install. Each check runs in a fresh interpreter, where nothing is compiled yet."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from repocomp.index import Index

_EDIT_A_LOADED_INDEX = """
import json, sys
from pathlib import Path
from graph.maxproduct import _bounded_dijkstra
from graph.relations import _fold_rows, _top_k_mask
from repocomp.index import Index, warm_kernels
from repocomp.index.term_index import _count_postings
from repocomp.index.vocabulary import _probe_many

def compiled():
    return [sorted(map(str, kernel.signatures)) for kernel in (_bounded_dijkstra, _top_k_mask, _fold_rows,
                                                          _count_postings, _probe_many)]

root, warm = Path(sys.argv[1]), sys.argv[2] == "warm"
index = Index.open(root, build=False)
loaded = compiled()
if warm:
    warm_kernels(index.config)
warmed = compiled()
text = (root / "app.py").read_text()
index.update_files({"app.py": text + "\\n\\ndef added(x):\\n    return hub(x) + step_3(x)\\n"})
index.refresh_relations()
index.region_strength("app.py", 0, 5)
index.term_index.score("hub(x)")
print(json.dumps({"loaded": loaded, "warmed": warmed, "edited": compiled()}))
"""


def _edit(repo: Path, mode: str) -> dict[str, list[list[str]]]:
    out = subprocess.run([sys.executable, "-c", _EDIT_A_LOADED_INDEX, str(repo), mode], capture_output=True,
                         text=True, timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_warm_kernels_compiles_what_the_first_edit_of_a_loaded_index_needs(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    # a hub that 300 functions call: its fragment's relation row is longer than top_k (the top-k kernel runs)
    calls = "\n\n".join(f"def step_{i}(x):\n    return hub(x) + {i}\n" for i in range(300))
    (repo / "app.py").write_text(f"from lib import hub\n\n\n{calls}", encoding="utf-8")
    (repo / "lib.py").write_text("def hub(x):\n    return x * 2\n", encoding="utf-8")
    Index.open(repo).save()

    cold = _edit(repo, "cold")
    assert cold["loaded"] == [[], [], [], [], []]  # loading a stored index runs no kernel
    assert all(cold["edited"])  # the first edit and query need all five
    warm = _edit(repo, "warm")
    assert warm["loaded"] == [[], [], [], [], []]
    assert warm["warmed"] == cold["edited"]  # the same specializations, before the edit
    assert warm["edited"] == warm["warmed"]  # the edit compiles nothing more


def test_a_failed_warm_up_is_logged_and_leaves_the_kernels_to_the_first_edit(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    import graph.maxproduct
    from repocomp.config.schema import Config
    from repocomp.index import warm

    def no_temporary_directory(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(graph.maxproduct, "_bounded_dijkstra", SimpleNamespace(signatures=[]))  # "not compiled"
    monkeypatch.setattr(warm.tempfile, "TemporaryDirectory", no_temporary_directory)
    warm.warm_kernels(Config())  # never raises: the folder's index must still become ready
    assert "could not ready the index kernels" in caplog.text
