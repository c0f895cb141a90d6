"""Files parsed in worker processes: the same parses as in-process, in order, and nothing lost when the workers
cannot start, stop half-way or fail on a file."""

from __future__ import annotations

import dataclasses
import logging
import subprocess
from pathlib import Path

import numpy as np
import pytest

from graph import parse_pool
from graph.languages import EXTENSIONS
from graph.parsing import parse_source

FIXTURES = Path(__file__).parent.parent / "fixtures"


def _sources() -> list[tuple[str, str]]:
    files = sorted(p for p in FIXTURES.rglob("*") if p.is_file() and p.suffix in EXTENSIONS)
    sources = [(p.read_text(encoding="utf-8"), EXTENSIONS[p.suffix]) for p in files]
    assert len({language for _, language in sources}) >= 3
    return sources * 3  # more chunks than workers


def _same(a, b) -> bool:
    for field in dataclasses.fields(a):
        x, y = getattr(a, field.name), getattr(b, field.name)
        if isinstance(x, np.ndarray):
            if x.dtype != y.dtype or not np.array_equal(x, y):
                return False
        elif list(x) != list(y) if isinstance(x, list | tuple) else x != y:
            return False
    return True


@pytest.fixture
def small_pool(monkeypatch):
    """The pool used for a few small files, each chunk one or two of them."""
    monkeypatch.setattr(parse_pool, "POOL_CHARS", 1)
    monkeypatch.setattr(parse_pool, "CHUNK_CHARS", 600)
    started: list[subprocess.Popen] = []
    popen = subprocess.Popen

    def counted(*a, **k):
        started.append(popen(*a, **k))
        return started[-1]

    monkeypatch.setattr(parse_pool.subprocess, "Popen", counted)
    return started


def test_workers_parse_as_this_process_does_in_order(small_pool):
    sources = _sources()
    pooled = list(parse_pool.parsed_files(sources, workers=2))
    assert len(small_pool) == 2 and all(p.args[1:] == ["-m", "graph.parse_pool"] for p in small_pool)
    assert all(p.poll() is not None for p in small_pool)  # stopped once done
    assert len(parse_pool._chunks(sources)) > 4
    assert len(pooled) == len(sources)
    assert all(_same(p, parse_source(*s)) for p, s in zip(pooled, sources))
    kinds = {id(k) for p in pooled for k in p.kinds}
    assert len(kinds) == len({k for p in pooled for k in p.kinds})  # one object per kind, as parsed here


def test_one_worker_or_little_source_is_parsed_here(small_pool, monkeypatch):
    sources = _sources()
    assert len(list(parse_pool.parsed_files(sources, workers=1))) == len(sources)
    monkeypatch.setattr(parse_pool, "POOL_CHARS", 1 << 30)
    assert len(list(parse_pool.parsed_files(sources, workers=4))) == len(sources)
    assert small_pool == []


def test_workers_that_cannot_start_leave_the_parse_to_this_process(monkeypatch, caplog):
    monkeypatch.setattr(parse_pool, "POOL_CHARS", 1)

    def no_process(*args, **kwargs):
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(parse_pool.subprocess, "Popen", no_process)
    sources = _sources()
    with caplog.at_level(logging.WARNING, logger="graph.parse_pool"):
        pooled = list(parse_pool.parsed_files(sources, workers=2))
    assert all(_same(p, parse_source(*s)) for p, s in zip(pooled, sources)) and len(pooled) == len(sources)
    assert "parse workers stopped" in caplog.text and "Too many open files" in caplog.text


def test_a_worker_killed_half_way_loses_no_file(small_pool, caplog):
    sources = _sources() * 10  # more results than a pipe holds: the workers wait for this process to read them
    parsed = parse_pool.parsed_files(sources, workers=2)
    first = [next(parsed) for _ in range(3)]
    small_pool[1].kill()
    with caplog.at_level(logging.WARNING, logger="graph.parse_pool"):
        rest = list(parsed)
    pooled = first + rest
    assert len(pooled) == len(sources) and all(_same(p, parse_source(*s)) for p, s in zip(pooled, sources))
    assert "parse workers stopped" in caplog.text


def test_a_caller_that_stops_early_stops_the_workers(small_pool, caplog):
    parsed = parse_pool.parsed_files(_sources() * 10, workers=2)
    next(parsed)
    with caplog.at_level(logging.WARNING, logger="graph.parse_pool"):
        parsed.close()
    assert len(small_pool) == 2 and all(p.poll() is not None for p in small_pool) and caplog.text == ""


def test_a_file_a_worker_fails_on_raises_here_as_in_process(small_pool):
    sources = _sources()[:4] + [("x = 1\n", "cobol")] + _sources()[:2]
    with pytest.raises(Exception) as in_process:
        parse_source("x = 1\n", "cobol")
    parsed = parse_pool.parsed_files(sources, workers=2)
    assert len([next(parsed) for _ in range(4)]) == 4
    with pytest.raises(type(in_process.value)):
        next(parsed)
    assert len(small_pool) == 2 and all(p.poll() is not None for p in small_pool)  # the workers are stopped
