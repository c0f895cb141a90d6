"""The model-free backend per language: comment-only lines of candidates (and of the buffer's previous line) are
never copied as a completion."""

from __future__ import annotations

import asyncio

from repocomp.backends import GenerationRequest
from repocomp.backends.extractive import ExtractiveBackend, extract_continuation

GO_CAND = """\
func (s *Store) Get(key string) (Item, bool) {
\t// Get returns the item stored under key; the second result says
\t// whether there was one.
\t/* the lock is held for reading
\t   while the map is read */
\ts.mu.RLock()
\tdefer s.mu.RUnlock()
\titem, ok := s.items[key]
\treturn item, ok
}
"""


def test_go_candidate_comments_are_skipped() -> None:
    prefix = "func (s *Store) Get(key string) (Item, bool) {\n\t"
    assert extract_continuation(prefix, (GO_CAND,), "go") == "s.mu.RLock()\ndefer s.mu.RUnlock()\nitem, ok := " \
        "s.items[key]\nreturn item, ok\n}".replace("\n", "\n\t").replace("\t}", "}")
    # the comment prose is what a language-blind copy proposes
    assert extract_continuation(prefix, (GO_CAND,), "python").startswith("// Get returns")


def test_go_previous_comment_line_is_passed_over() -> None:
    prefix = "func (s *Store) Get(key string) (Item, bool) {\n\t// look it up\n\t"
    assert extract_continuation(prefix, (GO_CAND,), "go").startswith("s.mu.RLock()\n")


def test_go_through_the_backend_request() -> None:
    r = GenerationRequest(prompt="", prefix="\ts.mu.RLock()\n\t", suffix="", candidates=(GO_CAND,),
                          max_new_tokens=64, language="go")
    assert asyncio.run(ExtractiveBackend().agenerate(r)).text.startswith("defer s.mu.RUnlock()")


def test_python_comment_lines_are_skipped() -> None:
    cand = "def total(xs):\n    # add them up\n    return sum(xs)\n"
    assert extract_continuation("def total(xs):\n    ", (cand,)) == "return sum(xs)"
