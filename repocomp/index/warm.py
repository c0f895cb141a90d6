"""`warm_kernels`: the index's numba kernels (the graph's, the term index's) compiled, or loaded from numba's cache,
on a two-file index, so that a process that loads a stored index (the language server) does not compile them inside
its first edit."""

from __future__ import annotations

import logging
import tempfile
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

_WARM_FILES = {"a.py": "def f(x):\n    return x + 1\n\n\nclass C:\n    def m(self):\n        return f(2)\n",
               "b.py": "from a import C, f\n\n\ndef g():\n    return f(1) + C().m()\n"}


def warm_kernels(config: Any) -> None:
    """Compile the index's numba kernels, or load them from numba's cache; never raises (a failure is logged).

    A stored index is loaded without running them, so the first edit of the session compiled them inside the
    update, under the write lock: with no cache yet (the first run after an install), a keystroke waited 1.9 s
    and compiling kept about 45 MB for the rest of the session. Here it happens before the folder is ready."""
    import numpy as np
    import scipy.sparse as sp

    from graph.maxproduct import _bounded_dijkstra
    from graph.relations import top_k_rows
    from repocomp.index.index import Index
    from repocomp.index.term_index import _count_postings
    from repocomp.index.vocabulary import StoredVocabulary, vocabulary_arrays

    if _bounded_dijkstra.signatures and _count_postings.signatures:  # this process has used an index: compiled
        return
    started = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="repocomp-warm-") as tmp:
            for name, text in _WARM_FILES.items():
                (Path(tmp) / name).write_text(text, encoding="utf-8")
            index = Index.build(tmp, config)
            index.update_files({"b.py": _WARM_FILES["b.py"] + "\n\ndef h():\n    return g()\n"})
            index.refresh_relations()
            index.region_strength("b.py", 0, 3)
            index.term_index.score("f(x)")  # the first request's kernels: the postings' count ...
            StoredVocabulary(*vocabulary_arrays({"f": 0}).values()).find_many(["f", "x"])  # ... a loaded one's ids
        top_k_rows(sp.csr_matrix(np.ones((1, 3))), 1)  # rows longer than top_k: too many fragments for two files
    except Exception:  # e.g. no writable temporary directory: the first edit compiles them, as before
        log.warning("could not ready the index kernels ahead of the first edit", exc_info=True)
        return
    log.info("index kernels ready in %.2f s", time.perf_counter() - started)
