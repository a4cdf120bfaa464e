"""Mechanical check of the retrieval queries (queries.json) against the corpus (corpus.json).

Run from anywhere::

    python tests/retrieval/check_queries.py

It exits non-zero, naming the offending query ids, when any of these fails:

* every query has the fields ``id``, ``query``, ``server``, ``tool``, ``kind``, ``split``
  with valid values, and the ids are unique;
* the gold ``(server, tool)`` exists in corpus.json;
* a ``shared`` query shares at least one content-word stem with its tool's document, and a
  ``paraphrase`` query shares none;
* ``split`` follows the id (odd -> ``tune``, even -> ``heldout``);
* the kinds are balanced overall and within each split.

It then prints a summary: queries, per kind, per split, distinct tools, servers covered.

Definitions (these are the ones the README states):

Tool document
    The words of: the tool name, the server's short name, the tool's ``title`` (and
    ``annotations.title``), its ``description``, and everything under ``inputSchema`` that
    names or describes a parameter: each property name at any depth (top-level
    ``properties`` and nested ones, through ``items``, ``anyOf``/``oneOf``/``allOf``,
    ``additionalProperties``, ``$defs``/``definitions``) and every ``description`` string
    found there.

Content words
    Text is split on every non-alphanumeric character and at camelCase boundaries
    (``listDirectory`` -> list, directory; ``HTMLParser`` -> html, parser) and
    letter/digit boundaries (``base64`` -> base, 64); then lowercased; words in
    ``STOP_WORDS`` (English function words and generic request words) are dropped.

Stem
    A deliberately simple, conservative suffix stripper (see ``stem``): ``ies``/``ied`` ->
    ``y``; otherwise the first of ``SUFFIXES`` (longest first) whose removal leaves at least
    three letters is removed (``ation``/``ations`` become ``ate``; a word ending in ``ss``,
    ``us`` or ``is`` loses no ``s``); then a doubled final consonant is undoubled and a final
    ``e`` is dropped, each only when more than three letters remain.  So files/file ->
    ``fil``, listing/list -> ``list``, created/creates/creation/create -> ``creat``,
    running/run -> ``run``, directories/directory -> ``directory``, statuses/status ->
    ``status``.  It does not handle irregular
    forms (wrote/write) or prefixes; a paraphrase is written to avoid those by hand too.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CORPUS_FILE = HERE / "corpus.json"
QUERIES_FILE = HERE / "queries.json"

KINDS = ("shared", "paraphrase")
SPLITS = ("tune", "heldout")

# English function words (pronouns, articles, auxiliaries, prepositions, conjunctions,
# common adverbs and determiners) plus generic request words.
STOP_WORDS = frozenset(
    """
    a about above after again against all also am an and any anybody anyone anything are
    aren as at be because been before being below between both but by can cannot could
    couldn d did didn do does doesn doing don done down during each either else etc ever
    every few for from further had hadn has hasn have haven having he her here hers herself
    him himself his how however i if in into is isn it its itself just ll m may me might
    mine more most much must mustn my myself neither no nor not now of off on once one only
    or other others our ours ourselves out over own per quite rather re s same shall shan
    she should shouldn so some somebody someone something such t than that the their theirs
    them themselves then there these they this those though through thus to too under until
    up upon us ve very was wasn we were weren what whatever when whenever where whether
    which while who whoever whom whose why will with within without won would wouldn y yet
    you your yours yourself yourselves many among amongst across along around behind beside
    besides beyond inside near onto toward towards via vs versus since still already even
    never always often
    please pls kindly can could would want wanna need needs like help let lets hey hi hello
    thanks thank ok okay sure really actually maybe basically quickly gonna
    got able go going
    """.split()
)

# Removed at most one per word, the first (longest) that leaves a stem of three letters.
SUFFIXES = (
    "ations",
    "ation",
    "ments",
    "ment",
    "ings",
    "ing",
    "ions",
    "ion",
    "ers",
    "er",
    "edly",
    "ed",
    "ly",
    "es",
    "s",
)
VOWELS = frozenset("aeiou")
MIN_STEM = 3

_CAMEL_1 = re.compile(r"([a-z0-9])([A-Z])")
_CAMEL_2 = re.compile(r"([A-Z]+)([A-Z][a-z])")
_LETTER_DIGIT = re.compile(r"([A-Za-z])([0-9])|([0-9])([A-Za-z])")
_NON_ALNUM = re.compile(r"[^A-Za-z0-9]+")


def words(text: str) -> list[str]:
    """Splits text into lowercase words at non-alphanumerics, camelCase and letter/digit boundaries."""
    text = _CAMEL_2.sub(r"\1 \2", _CAMEL_1.sub(r"\1 \2", text))
    text = _LETTER_DIGIT.sub(lambda m: " ".join(g for g in m.groups() if g), text)
    text = _LETTER_DIGIT.sub(lambda m: " ".join(g for g in m.groups() if g), text)
    return [word.lower() for word in _NON_ALNUM.split(text) if word]


def stem(word: str) -> str:
    """The conservative stem of one lowercase word (see the module docstring)."""
    if len(word) > 4 and word.endswith(("ies", "ied")):
        word = word[:-3] + "y"
    else:
        for suffix in SUFFIXES:
            if not word.endswith(suffix) or len(word) - len(suffix) < MIN_STEM:
                continue
            if suffix == "s" and word.endswith(("ss", "us", "is")):
                continue
            word = word[: -len(suffix)] + ("ate" if suffix.startswith("ation") else "")
            break
    if len(word) > MIN_STEM and word[-1] == word[-2] and word[-1] not in VOWELS and word[-1].isalpha():
        word = word[:-1]
    if len(word) > MIN_STEM and word.endswith("e"):
        word = word[:-1]
    return word


def content_stems(text: str) -> set[str]:
    """The stems of the content words of a text."""
    return {stem(word) for word in words(text) if word not in STOP_WORDS}


def _schema_texts(schema: Any) -> Iterator[str]:
    """Property names (at any depth) and description strings inside a JSON Schema."""
    if isinstance(schema, list):
        for item in schema:
            yield from _schema_texts(item)
        return
    if not isinstance(schema, dict):
        return
    description = schema.get("description")
    if isinstance(description, str):
        yield description
    properties = schema.get("properties")
    if isinstance(properties, dict):
        for name, sub in properties.items():
            yield name
            yield from _schema_texts(sub)
    for key in ("items", "anyOf", "oneOf", "allOf", "additionalProperties", "prefixItems", "not"):
        if key in schema:
            yield from _schema_texts(schema[key])
    for key in ("$defs", "definitions", "patternProperties"):
        defs = schema.get(key)
        if isinstance(defs, dict):
            for sub in defs.values():
                yield from _schema_texts(sub)


def document_texts(server_name: str, tool: dict[str, Any]) -> list[str]:
    """The texts that make up a tool's document."""
    texts = [tool.get("name", ""), server_name]
    for title in (tool.get("title"), (tool.get("annotations") or {}).get("title")):
        if isinstance(title, str):
            texts.append(title)
    if isinstance(tool.get("description"), str):
        texts.append(tool["description"])
    texts.extend(_schema_texts(tool.get("inputSchema") or {}))
    return texts


def document_stems(server_name: str, tool: dict[str, Any]) -> set[str]:
    """The content-word stems of a tool's document."""
    stems: set[str] = set()
    for text in document_texts(server_name, tool):
        stems |= content_stems(text)
    return stems


def load_documents(corpus: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    """Maps (server short name, tool name) to the tool's document stems."""
    return {
        (server["name"], tool["name"]): document_stems(server["name"], tool)
        for server in corpus["servers"]
        for tool in server["tools"]
    }


def check(queries: list[dict[str, Any]], documents: dict[tuple[str, str], set[str]]) -> dict[int | str, list[str]]:
    """Checks every query; returns the problems found, keyed by query id ("*" for global ones)."""
    problems: dict[int | str, list[str]] = {}

    def problem(key: int | str, text: str) -> None:
        problems.setdefault(key, []).append(text)

    ids = Counter(query.get("id") for query in queries)
    for query in queries:
        qid = query.get("id")
        if not isinstance(qid, int) or isinstance(qid, bool) or qid < 1:
            problem(str(qid), "id must be a positive integer")
            continue
        if ids[qid] > 1:
            problem(qid, "duplicate id")
        expected = {"id", "query", "server", "tool", "kind", "split"}
        if set(query) != expected:
            problem(qid, f"fields must be exactly {sorted(expected)}")
        if not isinstance(query.get("query"), str) or not query["query"].strip():
            problem(qid, "empty query")
            continue
        kind = query.get("kind")
        if kind not in KINDS:
            problem(qid, f"kind must be one of {KINDS}")
        want_split = "tune" if qid % 2 == 1 else "heldout"
        if query.get("split") != want_split:
            problem(qid, f"split must be {want_split!r} (odd id -> tune, even -> heldout)")
        key = (query.get("server"), query.get("tool"))
        if key not in documents:
            problem(qid, f"no tool {key[1]!r} on server {key[0]!r} in corpus.json")
            continue
        common = content_stems(query["query"]) & documents[key]
        if kind == "shared" and not common:
            problem(qid, "shared query shares no content word with its tool's document")
        if kind == "paraphrase" and common:
            problem(qid, f"paraphrase query shares content words with its tool's document: {sorted(common)}")

    for split in (None, *SPLITS):
        chosen = [q for q in queries if split is None or q.get("split") == split]
        counts = Counter(q.get("kind") for q in chosen)
        if abs(counts["shared"] - counts["paraphrase"]) > 1:
            problem("*", f"kinds unbalanced in {split or 'all'}: {dict(counts)}")
    splits = Counter(q.get("split") for q in queries)
    if abs(splits["tune"] - splits["heldout"]) > 1:
        problem("*", f"splits unbalanced: {dict(splits)}")
    return problems


def summary(queries: list[dict[str, Any]], documents: dict[tuple[str, str], set[str]]) -> Iterable[str]:
    """Lines describing the query set."""
    servers_in_corpus = sorted({server for server, _ in documents})
    tools = Counter((q["server"], q["tool"]) for q in queries)
    servers = Counter(q["server"] for q in queries)
    yield f"queries: {len(queries)}"
    yield "per kind: " + ", ".join(f"{k} {sum(q['kind'] == k for q in queries)}" for k in KINDS)
    yield "per split: " + ", ".join(f"{s} {sum(q['split'] == s for q in queries)}" for s in SPLITS)
    for split in SPLITS:
        yield f"  {split}: " + ", ".join(
            f"{k} {sum(q['kind'] == k and q['split'] == split for q in queries)}" for k in KINDS
        )
    most = max(tools.values()) if tools else 0
    yield f"distinct tools: {len(tools)} of {len(documents)} in the corpus (at most {most} queries per tool)"
    yield f"servers covered: {len(servers)} of {len(servers_in_corpus)}"
    yield "  " + ", ".join(f"{name} {servers.get(name, 0)}" for name in servers_in_corpus)


def main(argv: list[str] | None = None) -> int:
    """Runs the check; returns the exit status."""
    args = sys.argv[1:] if argv is None else argv
    queries_file = Path(args[0]) if args else QUERIES_FILE
    corpus = json.loads(CORPUS_FILE.read_text())
    queries = json.loads(queries_file.read_text())
    documents = load_documents(corpus)
    problems = check(queries, documents)
    for line in summary(queries, documents):
        print(line)
    if problems:
        print(f"\nFAILED: {len(problems)} offending id(s)", file=sys.stderr)
        for key, texts in sorted(problems.items(), key=lambda item: (isinstance(item[0], str), str(item[0]))):
            for text in texts:
                print(f"  {key}: {text}", file=sys.stderr)
        offending = sorted(k for k in problems if isinstance(k, int))
        if offending:
            print("offending ids: " + " ".join(map(str, offending)), file=sys.stderr)
        return 1
    print("\nOK: every query keeps its kind; ids, tools, splits and balance check out")
    return 0


if __name__ == "__main__":
    sys.exit(main())
