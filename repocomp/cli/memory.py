"""`repocomp memory show|clear PATH`: the editing session the language server keeps for a folder.

The session (recent edits as hunks, the thoughts derived from them, accepted completions) lives in the user's
cache, never in the repository; `show` prints it, `clear` forgets it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from repocomp.config.loading import load_config
from repocomp.errors import RepocompError
from repocomp.text import encodable


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("memory", help="show or clear the editing session kept for a folder")
    verbs = p.add_subparsers(dest="verb", required=True)
    for verb, text in (("show", "print the folder's recorded session (hunks and thoughts)"),
                       ("clear", "forget the folder's recorded session")):
        v = verbs.add_parser(verb, help=text)
        v.add_argument("path", type=Path, nargs="?", default=Path("."), help="the repository's folder (default: .)")
        v.add_argument("--config", type=Path, help="a TOML file with the settings (default: the repository's)")
        if verb == "show":
            v.add_argument("--json", action="store_true", help="print the session as JSON")
        v.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from repocomp.memory.store import RecallStore

    root = args.path.resolve()
    if not root.is_dir():
        raise RepocompError(f"{root} is not a folder")
    config = load_config(root, args.config)
    store = RecallStore(root, config.memory.store_max_bytes)
    if args.verb == "clear":
        store.clear()
        print(f"repocomp: the session of {encodable(str(root))} is forgotten ({encodable(str(store.path))})")
        return 0
    hunks, thoughts = store.load()
    if args.json:
        print(json.dumps({"store": str(store.path), "hunks": [vars(h) for h in hunks],
                          "thoughts": [vars(t) for t in thoughts]}, indent=2, default=list))
        return 0
    print(f"session of {encodable(str(root))}: {len(hunks)} hunks, {len(thoughts)} thoughts "
          f"({encodable(str(store.path))})")
    for t in thoughts:
        print(f"  thought  {encodable(t.text)}" + (f"  (x{t.count})" if t.count > 1 else ""))
    for h in hunks[-20:]:
        first = next((line for line in h.inserted if line.strip()), "")
        print(f"  hunk     {encodable(h.path)}:{h.start_line + 1}  -{len(h.removed)} +{len(h.inserted)}  "
              f"{h.source}  | {encodable(first.strip())[:80]}")
    if len(hunks) > 20:
        print(f"  ... and {len(hunks) - 20} older hunks (--json shows all)")
    return 0
