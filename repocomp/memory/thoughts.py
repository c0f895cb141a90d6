"""Thoughts: TiM's post-thinking over edit hunks, deterministic and derived from the real diff.

Three kinds, each with a merge key (TiM merges thoughts about the same head entity):
- `rename` (`rename:old->new`): a replaced range keeps its lines' shape and one identifier differs, the same way
  on every changed line (`total` became `amount`);
- `signature` (`signature:f`): the parameters of `def f(...)` / `function f(` / `func f(` changed, so calls of
  `f` change;
- `repeated` (`repeated:<shape>`): a line of the same shape (identifiers and literals normalized) was added in
  several hunks; it is a thought (shown) once two hunks hold it, a latent one (kept, not shown) before.

`think(hunk, previous)` re-derives what one hunk supports and returns the whole updated list: a thought the hunk
supported and no longer does loses it (an undone hunk, one merged away, or a half-typed name that became
another), and is forgotten when nothing supports it; a thought seen again in another hunk is merged (count + 1);
a rename that reverses an existing one (`b->a` after `a->b`) forgets the contradicted one (TiM's forget).
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from dataclasses import dataclass

from repocomp.memory.hunks import Hunk
from repocomp.memory.recall import KEYWORDS as _KEYWORDS
from repocomp.tokenize import code_tokens

__all__ = ["Thought", "line_shape", "think", "visible"]

MAX_THOUGHTS = 256  # kept per session, latent ones included (the least recent leave first)
MAX_IDS = 32  # hunk ids remembered per thought (count goes on past it)
MAX_PATHS = 8
MAX_HUNK_LINES = 400  # a larger hunk (a paste) is not thought about: shapes and renames come from small edits
MIN_SHAPE_TOKENS = 5  # a line shape shorter than this (`x = y`, `pass`) is too common to mean anything
_SHOWN_CHARS = 80  # an example line in a thought's text is cut here

_WORD = re.compile(r"[A-Za-z_\u00c0-\uffff][A-Za-z0-9_\u00c0-\uffff]*\Z")
_NUMBER = re.compile(r"\d|0[xXbBoO]")
_DEF_RE = re.compile(r"^\s*(?:(?:async|export|default|public|private|protected|static)\s+)*"
                     r"(?:def\s+(?P<py>\w+)\s*\(|function\s*\*?\s*(?P<js>\w+)\s*\("
                     r"|func\s+(?:\([^)]*\)\s*)?(?P<go>\w+)\s*(?:\[[^\]]*\]\s*)?\()")


@dataclass
class Thought:
    """TiM's post-thinking: one derived statement about the session."""

    kind: str  # "rename" | "signature" | "repeated"
    key: str  # merge key: "rename:old->new", "signature:f", "repeated:<shape>"
    text: str  # ONE compact line, no comment marker: "renamed `total` to `amount` (shop/cart.py)"
    paths: tuple[str, ...]
    hunk_ids: tuple[int, ...]
    time: float
    count: int = 1


def visible(thought: Thought) -> bool:
    """Is this thought worth showing (a repeated shape needs two places; the others one)?"""
    return thought.count >= (2 if thought.kind == "repeated" else 1)


# -- derivation --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Derived:
    kind: str
    key: str
    detail: str  # the statement without its places: "renamed `total` to `amount`"


def line_shape(line: str) -> tuple[str, ...]:
    """A line's shape: its tokens, identifiers as `_` (keywords kept), numbers as `0`, strings as `""`."""
    text = re.sub(r"(?:[rbuf]|rb|br|fr|rf)?(\"\"\"|'''|\"|')(?:\\.|(?!\1).)*\1", ' "" ', line.strip(), flags=re.IGNORECASE)
    shape = []
    for tok in code_tokens(text):
        if tok in _KEYWORDS and not tok[0].isupper() or tok in ("True", "False", "None"):
            shape.append(tok)
        elif _NUMBER.match(tok):
            shape.append("0")
        elif _WORD.match(tok):
            shape.append("_")
        else:
            shape.append(tok)
    return tuple(shape)


def _rename(removed: list[str], inserted: list[str]) -> tuple[str, str] | None:
    """(old, new) when the replaced lines keep their shape and exactly one identifier differs, consistently."""
    pairs: list[tuple[str, str]] = []
    matcher = difflib.SequenceMatcher(None, removed, inserted, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "replace":
            if i2 - i1 != j2 - j1:
                return None
            pairs.extend(zip(removed[i1:i2], inserted[j1:j2]))
        elif op != "equal":
            return None  # lines added or removed: not a rename
    found: tuple[str, str] | None = None
    for old_line, new_line in pairs:
        old_toks, new_toks = code_tokens(old_line), code_tokens(new_line)
        if len(old_toks) != len(new_toks):
            return None
        for o, n in zip(old_toks, new_toks):
            if o == n:
                continue
            if not (_WORD.match(o) and _WORD.match(n)) or o in _KEYWORDS or n in _KEYWORDS:
                return None
            if found is None:
                found = (o, n)
            elif found != (o, n):
                return None
    return found


def _params(lines: list[str], i: int, start: int) -> list[str] | None:
    """Parameter names of the signature whose `(` is at `lines[i][start - 1]` (continued over a few lines)."""
    depth, buf, text = 1, [], lines[i][start:]
    row = i
    while True:
        for ch in text:
            if ch in "([{":
                depth += 1
            elif ch in ")]}":
                depth -= 1
                if depth == 0:
                    break
            buf.append(ch)
        if depth == 0 or row + 1 >= len(lines) or row - i >= 8:
            break
        row += 1
        buf.append(" ")
        text = lines[row]
    parts: list[str] = []
    cur: list[str] = []
    level = 0
    for ch in "".join(buf):
        if ch in "([{<":
            level += 1
        elif ch in ")]}>":
            level -= 1
        if ch == "," and level == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    names = []
    for part in parts:
        m = re.match(r"\s*(?:\.\.\.|\*\*|\*|&|mut\s+)?\s*([A-Za-z_]\w*)", part)
        if m and m.group(1) not in ("self", "cls", "this"):
            names.append(m.group(1))
        elif part.strip() in ("*", "/"):
            continue
    return names


def _signatures(lines: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for i, line in enumerate(lines):
        m = _DEF_RE.match(line)
        if m:
            name = m.group("py") or m.group("js") or m.group("go")
            params = _params(lines, i, m.end())
            if params is not None:
                out.setdefault(name, params)
    return out


def _shown_names(names: list[str]) -> str:
    return ", ".join(f"`{n}`" for n in names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")


def _signature_changes(removed: list[str], inserted: list[str]) -> list[_Derived]:
    before, after = _signatures(removed), _signatures(inserted)
    out = []
    for name, new in after.items():
        old = before.get(name)
        if old is None or old == new:
            continue
        added = [p for p in new if p not in old]
        dropped = [p for p in old if p not in new]
        if added and not dropped:
            what = f"parameter{'s' if len(added) > 1 else ''} {_shown_names(added)} added to `{name}`"
        elif dropped and not added:
            what = f"parameter{'s' if len(dropped) > 1 else ''} {_shown_names(dropped)} removed from `{name}`"
        else:
            what = f"`{name}({', '.join(old)})` became `{name}({', '.join(new)})`"
        out.append(_Derived("signature", f"signature:{name}", f"{what}: calls of `{name}` change"))
    return out


def _added_shapes(removed: list[str], inserted: list[str]) -> dict[str, str]:
    """Shapes of the lines this hunk added (not those it kept or only renamed): shape key -> example line."""
    old_shapes = {line_shape(line) for line in removed}
    out: dict[str, str] = {}
    for line in inserted:
        shape = line_shape(line)
        if len(shape) < MIN_SHAPE_TOKENS or shape in old_shapes:
            continue
        out.setdefault(" ".join(shape), line.strip())
    return out


def derive(hunk: Hunk) -> list[_Derived]:
    """What one hunk supports (nothing for a tombstone or an undone hunk)."""
    removed, inserted = hunk.removed, hunk.inserted
    if removed == inserted or len(removed) + len(inserted) > MAX_HUNK_LINES:
        return []
    out: list[_Derived] = []
    renamed = _rename(removed, inserted) if removed and inserted else None
    if renamed is not None:
        old, new = renamed
        out.append(_Derived("rename", f"rename:{old}->{new}", f"renamed `{old}` to `{new}`"))
    out.extend(_signature_changes(removed, inserted))
    if renamed is None:
        for shape, example in _added_shapes(removed, inserted).items():
            shown = example if len(example) <= _SHOWN_CHARS else example[:_SHOWN_CHARS - 3] + "..."
            out.append(_Derived("repeated", f"repeated:{shape}", f"added lines like `{shown}`"))
    return out


# -- the thought list ----------------------------------------------------------------------------------------
def _text(detail: str, count: int, paths: tuple[str, ...]) -> str:
    where = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
    places = f" in {count} places" if count > 1 else ""
    return f"{detail}{places} ({where})"


def _detail(thought: Thought) -> str:
    """The statement of a thought without its places (its text up to the place suffix)."""
    text = thought.text
    cut = text.rfind(" (")
    text = text[:cut] if cut > 0 else text
    m = re.search(r" in \d+ places\Z", text)
    return text[:m.start()] if m else text


def _reverse_key(key: str) -> str | None:
    if key.startswith("rename:") and "->" in key:
        old, new = key[len("rename:"):].split("->", 1)
        return f"rename:{new}->{old}"
    return None


def think(hunk: Hunk, previous: list[Thought]) -> list[Thought]:
    """The updated thoughts after `hunk` was created, changed, undone or merged away (deterministic).

    `previous` is not modified; the result holds (copies of) its thoughts, updated, oldest first."""
    derived = {d.key: d for d in derive(hunk)}
    forget = {_reverse_key(k) for k in derived} - {None}
    out: list[Thought] = []
    by_key: dict[str, Thought] = {}
    for t in previous:  # untouched thoughts are shared with `previous`; a changed one is a copy
        supported = hunk.id in t.hunk_ids
        if supported and t.key not in derived:  # no longer supported by this hunk
            t = dataclasses.replace(t, hunk_ids=tuple(i for i in t.hunk_ids if i != hunk.id), count=t.count - 1)
            if t.count <= 0 or not t.hunk_ids:
                continue  # forgotten
            t.text = _text(_detail(t), t.count, t.paths)
        elif t.key in forget and not supported:
            continue  # contradicted by this hunk (a rename reversed): forgotten
        elif t.key in derived:
            t = dataclasses.replace(t)
        out.append(t)
        by_key[t.key] = t
    for key, d in derived.items():
        found = by_key.get(key)
        if found is None:
            t = Thought(d.kind, key, "", (hunk.path,), (hunk.id,), hunk.last_time, 1)
            out.append(t)
            fresh = True
        else:
            t, fresh = found, False
            if hunk.id not in t.hunk_ids:
                t.hunk_ids = (t.hunk_ids + (hunk.id,))[-MAX_IDS:]
                t.count += 1
                if hunk.path not in t.paths:
                    t.paths = (t.paths + (hunk.path,))[-MAX_PATHS:]
        t.time = max(t.time, hunk.last_time)
        # the latest signature is the one to state; the others keep their first wording
        detail = d.detail if fresh or d.kind == "signature" else _detail(t)
        t.text = _text(detail, t.count, t.paths)
    if len(out) > MAX_THOUGHTS:  # latent thoughts leave first, then the least recent
        order = sorted(range(len(out)), key=lambda i: (visible(out[i]), out[i].time, i))
        drop = set(order[:len(out) - MAX_THOUGHTS])
        out = [t for i, t in enumerate(out) if i not in drop]
    return out
