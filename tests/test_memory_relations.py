"""FragRel over the session with a real index: an entry's relation to another entry is theirs, not the cursor's."""

from __future__ import annotations

from pathlib import Path

from repocomp.backends.model_defaults import resolve_config
from repocomp.config.schema import Config
from repocomp.context.retrieval import Retriever, session_relation
from repocomp.index import Index
from repocomp.prompt.cursor import Cut, Hole

MONEY = "def to_cents(amount):\n    return int(round(amount * 100))\n"
BILLING = "from pkg.money import to_cents\n\n\ndef bill(total):\n    return to_cents(total)\n"
WEATHER = "def forecast(city):\n    return city.upper()\n"


def test_entries_relate_to_each_other_through_the_graph_not_through_the_cursor(tmp_path: Path) -> None:
    for name, text in {"money.py": MONEY, "billing.py": BILLING, "__init__.py": ""}.items():
        (tmp_path / "pkg" / name).parent.mkdir(exist_ok=True)
        (tmp_path / "pkg" / name).write_text(text)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "weather.py").write_text(WEATHER)
    index = Index.build(tmp_path, Config())
    retriever = Retriever(index, resolve_config(Config()))
    lines = WEATHER.split("\n")
    hole = Hole("other/weather.py", Cut.from_lines(lines, 1, 4))
    relation = session_relation(index, retriever, hole, Config().fragments.window)

    money_billing = relation("pkg/money.py", 0, "pkg/billing.py", 3)
    money_cursor = relation("pkg/money.py", 0, hole.path, hole.line)
    # billing calls to_cents (a call edge, 0.8) in the same folder: strongly related; the weather file only
    # through the directory tree, far weaker
    assert money_billing >= 0.3 and money_cursor < money_billing / 2, (money_billing, money_cursor)
    # the cursor's own relations are unchanged: the region before it
    assert relation(hole.path, 0, hole.path, hole.line) == 1.0
