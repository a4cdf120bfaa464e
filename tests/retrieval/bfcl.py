#!/usr/bin/env python3
"""Build a tool-retrieval benchmark from the BFCL data shipped in `bfcl-eval`.

The Berkeley Function Calling Leaderboard (BFCL) ships its test data inside the
PyPI package `bfcl-eval`, as JSON-lines files under `bfcl_eval/data/`:

* `BFCL_v<N>_<category>.json`: one question per line, with `id`, `question`
  (a list of turns, each a list of `{"role", "content"}` messages) and
  `function` (the function definitions offered to the model for it);
* `possible_answer/BFCL_v<N>_<category>.json`: the ground truth, one line per
  question with the same `id`, where `ground_truth` is a list of calls, each a
  one-key object `{function_name: {param: [accepted values]}}`.

This script reads only those data files (it never imports the package's code),
pools the function definitions of the single-call categories into one catalog
deduplicated by definition, and writes, for every question, its user text and
the catalog ids of its gold function(s):

    {"source": {...}, "functions": [...], "questions": [...]}

Usage:

    python tests/retrieval/bfcl.py --pkgs DIR --out FILE

where DIR is the `pip install --target` directory holding `bfcl_eval/`
(see `setup.sh`). A summary (counts per category, anything odd) goes to stderr.
Standard library only.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any

# Single-call categories, in the order their functions enter the catalog.
# Each entry lists accepted file-name stems: older BFCL releases called
# `simple_python` just `simple`. Irrelevance, live_irrelevance,
# live_relevance, multi_turn_*, memory, web_search and format_sensitivity are
# deliberately left out: they have no gold function, several turns, or test
# something other than picking a function for one request.
CATEGORIES: list[tuple[str, tuple[str, ...]]] = [
    ("simple_python", ("simple_python", "simple")),
    ("simple_java", ("simple_java", "java")),
    ("simple_javascript", ("simple_javascript", "javascript")),
    ("multiple", ("multiple",)),
    ("parallel", ("parallel",)),
    ("parallel_multiple", ("parallel_multiple",)),
    ("live_simple", ("live_simple",)),
    ("live_multiple", ("live_multiple",)),
    ("live_parallel", ("live_parallel",)),
    ("live_parallel_multiple", ("live_parallel_multiple",)),
]

# Categories the brief requires; the others are taken only "if present".
REQUIRED = {
    "simple_python",
    "multiple",
    "parallel",
    "parallel_multiple",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
}

PACKAGE = "bfcl-eval"
MODULE = "bfcl_eval"


def canonical(obj: Any) -> str:
    """Return a canonical JSON text of `obj` (sorted keys, no spaces).

    Two function definitions are the same tool exactly when their canonical
    texts are equal.
    """
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def read_jsonl(path: str) -> list[dict[str, Any]]:
    """Read a JSON-lines file (BFCL's `.json` files hold one object a line)."""
    rows: list[dict[str, Any]] = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise SystemExit(f"{path}:{n}: bad JSON: {e}") from e
    return rows


def package_version(pkgs: str) -> str:
    """Read bfcl-eval's version from its installed `.dist-info` metadata."""
    found = sorted(glob.glob(os.path.join(pkgs, f"{MODULE}-*.dist-info")))
    if len(found) != 1:
        raise SystemExit(f"expected one {MODULE}-*.dist-info in {pkgs}, found {len(found)}")
    with open(os.path.join(found[0], "METADATA"), encoding="utf-8") as f:
        for line in f:
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
    raise SystemExit(f"no Version: in {found[0]}/METADATA")


def find_files(data_dir: str) -> dict[str, tuple[str, str]]:
    """Map each present category to its (question file, answer file).

    When several BFCL_v<N> generations sit side by side, the highest N wins.
    """
    out: dict[str, tuple[str, str]] = {}
    for cat, stems in CATEGORIES:
        for stem in stems:
            hits = []
            for p in glob.glob(os.path.join(data_dir, f"BFCL_v*_{stem}.json")):
                m = re.fullmatch(rf"BFCL_v(\d+)_{re.escape(stem)}\.json", os.path.basename(p))
                if m:
                    hits.append((int(m.group(1)), p))
            if hits:
                q = max(hits)[1]
                a = os.path.join(data_dir, "possible_answer", os.path.basename(q))
                if not os.path.isfile(a):
                    raise SystemExit(f"{q} has no answer file {a}")
                out[cat] = (q, a)
                break
    missing = REQUIRED - out.keys()
    if missing:
        raise SystemExit(f"missing categories in {data_dir}: {', '.join(sorted(missing))}")
    return out


def message_text(content: Any) -> str:
    """Text of a message's content: a string, or a list of text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content)


def user_query(question: Any, qid: str) -> tuple[str, int]:
    """Return the user text of a question and how many messages were skipped.

    BFCL's `question` is a list of turns, each a list of messages. The query
    is the content of the LAST message with role "user" in the FIRST turn;
    system messages (some live questions have one) and any other messages of
    that turn are dropped. Single-call categories have exactly one turn.
    """
    if not isinstance(question, list) or not question:
        raise SystemExit(f"{qid}: question is not a non-empty list of turns")
    turn = question[0]
    if isinstance(turn, dict):  # tolerate a flat list of messages
        turn = question
    users = [m for m in turn if m.get("role") == "user"]
    if not users:
        raise SystemExit(f"{qid}: first turn has no user message")
    return message_text(users[-1].get("content", "")), len(turn) - 1


@dataclass
class Catalog:
    """Function definitions pooled across categories, deduplicated."""

    functions: list[dict[str, Any]] = field(default_factory=list)
    by_canon: dict[str, str] = field(default_factory=dict)
    by_name: dict[str, list[str]] = field(default_factory=dict)
    ids: set[str] = field(default_factory=set)
    name_of: dict[str, str] = field(default_factory=dict)

    def add(self, fn: dict[str, Any]) -> str:
        """Add a definition (if new) and return its catalog id.

        The id is the function's name; a different definition sharing a name
        already taken gets `<name>__2`, `<name>__3`, ... Dots in names (e.g.
        `math.factorial`) are kept; all BFCL names fit MCP's tool-name
        alphabet `[A-Za-z0-9_.-]`, and so do these ids.
        """
        key = canonical(fn)
        if key in self.by_canon:
            return self.by_canon[key]
        name = str(fn.get("name", ""))
        fid, k = name, 1
        while fid in self.ids:
            k += 1
            fid = f"{name}__{k}"
        self.ids.add(fid)
        self.by_canon[key] = fid
        self.by_name.setdefault(name, []).append(fid)
        self.name_of[fid] = name
        # "id" first; a definition's own "id" key (none in BFCL) would lose.
        self.functions.append({"id": fid, **{a: b for a, b in fn.items() if a != "id"}})
        return fid


def build(pkgs: str) -> tuple[dict[str, Any], list[str]]:
    """Build the benchmark from an install dir; return it and report lines."""
    data_dir = os.path.join(pkgs, MODULE, "data")
    if not os.path.isdir(data_dir):
        raise SystemExit(f"no {MODULE}/data in {pkgs}: run setup.sh first")
    files = find_files(data_dir)
    catalog = Catalog()
    questions: list[dict[str, Any]] = []
    report: list[str] = []
    odd: list[str] = []
    rows: list[tuple[str, int, int, int, int, int]] = []
    multi_gold_total = 0
    system_skipped = 0

    for cat, _ in CATEGORIES:
        if cat not in files:
            report.append(f"category {cat}: not in this release, skipped")
            continue
        qpath, apath = files[cat]
        qs = read_jsonl(qpath)
        answers = {a["id"]: a for a in read_jsonl(apath)}
        before = 0
        in_cat: set[str] = set()
        new_ids = len(catalog.functions)
        multi_gold = 0
        for q in qs:
            qid = q["id"]
            query, skipped = user_query(q.get("question"), qid)
            system_skipped += skipped
            if not query.strip():
                odd.append(f"{qid}: empty user text")
            offered: dict[str, str] = {}
            for fn in q.get("function", []):
                before += 1
                fid = catalog.add(fn)
                in_cat.add(fid)
                if fn.get("name") in offered:
                    odd.append(f"{qid}: two offered functions named {fn.get('name')}")
                offered.setdefault(fn.get("name"), fid)
            ans = answers.get(qid)
            if ans is None:
                odd.append(f"{qid}: no possible answer, question dropped")
                continue
            gold: list[str] = []
            for call in ans.get("ground_truth", []):
                for gname in call:  # each call is {name: {args}}
                    if gname in offered:
                        fid = offered[gname]
                    else:
                        # Gold not among its own functions: fall back to any
                        # catalog definition of that name, and say so.
                        cands = catalog.by_name.get(gname, [])
                        odd.append(f"{qid}: gold {gname} not among its own functions; catalog has {len(cands)}")
                        if not cands:
                            continue
                        fid = cands[0]
                    if fid not in gold:
                        gold.append(fid)
            if not gold:
                odd.append(f"{qid}: no gold function, question dropped")
                continue
            if len(gold) > 1:
                multi_gold += 1
            # Extra fields beyond the brief: `gold_names` (near-identical
            # definitions share names, so a name-level hit is worth scoring
            # too) and `functions` (the ids this question offered in BFCL).
            questions.append(
                {
                    "id": qid,
                    "category": cat,
                    "query": query,
                    "gold": gold,
                    "gold_names": sorted({catalog.name_of[g] for g in gold}),
                    "functions": list(offered.values()),
                }
            )
        extra = set(answers) - {q["id"] for q in qs}
        if extra:
            odd.append(f"{cat}: {len(extra)} answers without a question")
        multi_gold_total += multi_gold
        rows.append((cat, len(qs), before, len(in_cat), len(catalog.functions) - new_ids, multi_gold))

    clashes = {n: ids for n, ids in catalog.by_name.items() if len(ids) > 1}
    dotted = sum(1 for f in catalog.functions if "." in str(f.get("name", "")))
    version = package_version(pkgs)

    report.append(f"{PACKAGE} {version}, data in {MODULE}/data")
    report.append(f"{'category':24} {'questions':>9} {'fns':>6} {'uniq':>6} {'new':>6} {'multigold':>9}")
    for r in rows:
        report.append(f"{r[0]:24} {r[1]:9} {r[2]:6} {r[3]:6} {r[4]:6} {r[5]:9}")
    report.append(
        f"{'total':24} {sum(r[1] for r in rows):9} "
        f"{sum(r[2] for r in rows):6} {'':6} "
        f"{len(catalog.functions):6} {multi_gold_total:9}"
    )
    report.append(
        "(fns = definitions listed by the category's questions; "
        "uniq = distinct within the category; new = added to the "
        "pooled catalog; multigold = questions with >1 distinct "
        "gold function)"
    )
    report.append(
        f"questions kept: {len(questions)}; catalog functions: "
        f"{len(catalog.functions)} ({len(catalog.by_name)} distinct "
        f"names)"
    )
    report.append(
        f"name clashes (one name, several definitions): "
        f"{len(clashes)} names, {sum(len(v) for v in clashes.values())}"
        f" definitions"
    )
    report.append(f"functions with dots in their names (kept as is): {dotted}")
    report.append(f"non-user messages dropped from first turns: {system_skipped}")
    report.append(f"oddities: {len(odd)}")
    report.extend("  " + o for o in odd[:50])
    if len(odd) > 50:
        report.append(f"  ... and {len(odd) - 50} more")

    def rel(path: str) -> str:
        """Path relative to the install dir, so the output names no machine."""
        return os.path.relpath(path, pkgs).replace(os.sep, "/")

    with open(__file__, "rb") as f:
        me = hashlib.sha256(f.read()).hexdigest()
    out = {
        "source": {
            "package": PACKAGE,
            "version": version,
            "categories": {c: rel(files[c][0]) for c, _ in CATEGORIES if c in files},
            "answers": {c: rel(files[c][1]) for c, _ in CATEGORIES if c in files},
            "generator_sha256": me,
            "name_clashes": len(clashes),
        },
        "functions": catalog.functions,
        "questions": questions,
    }
    return out, report


def main() -> int:
    """Parse arguments, build the benchmark, write it atomically."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pkgs", required=True, help="pip --target dir that holds bfcl_eval/")
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--quiet", action="store_true", help="no summary")
    args = ap.parse_args()
    out, report = build(args.pkgs)
    tmp = args.out + ".tmp"
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    os.replace(tmp, args.out)
    if not args.quiet:
        for line in report:
            print(line, file=sys.stderr)
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
