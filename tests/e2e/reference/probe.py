"""Talk to one reference server directly and print every line that crossed stdio.

The facts in README.md come from these runs (no Vigil involved):

    PY=$HOME/.cache/vigil/venv/bin/python
    $PY tests/e2e/reference/probe.py capabilities          # tool names per client capability set
    $PY tests/e2e/reference/probe.py tools '{"sampling":{}}' # tools/list for one capability set
    $PY tests/e2e/reference/probe.py sampling              # trigger-sampling-request, answered
    $PY tests/e2e/reference/probe.py elicitation           # trigger-elicitation-request, accepted
    $PY tests/e2e/reference/probe.py gzip                  # gzip-file-as-resource, then its resource read
    $PY tests/e2e/reference/probe.py subscribe             # resources/subscribe + toggle-subscriber-updates
    $PY tests/e2e/reference/probe.py progress              # trigger-long-running-operation with a token
    $PY tests/e2e/reference/probe.py filesystem            # read_text_file of a 3 MiB file (sizes only)
    $PY tests/e2e/reference/probe.py memory | time | git   # one typical call each

Servers come from `setup.sh`'s cache (`$VIGIL_REFERENCE`). Lines are
printed as `>>` (to the server) and `<<` (from it), cut at 1,500 characters
unless `--full` is given.
"""

from __future__ import annotations

import argparse
import base64
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reference import wire  # noqa: E402

CAPABILITY_SETS = {
    "none": "{}",
    "sampling": '{"sampling":{}}',
    "elicitation {}": '{"elicitation":{}}',
    "elicitation form": '{"elicitation":{"form":{}}}',
    "elicitation url": '{"elicitation":{"url":{}}}',
    "roots": '{"roots":{"listChanged":true}}',
    "tasks": '{"tasks":{"list":{},"cancel":{},'
    '"requests":{"sampling":{"createMessage":{}},"elicitation":{"create":{}}}}}',
    "all": '{"sampling":{},"elicitation":{"form":{},"url":{}},"roots":{"listChanged":true},'
    '"tasks":{"list":{},"cancel":{},"requests":{"sampling":{"createMessage":{}},"elicitation":{"create":{}}}}}',
}
HANDLERS: dict[str, wire.Handler] = {
    "sampling/createMessage": lambda _m, _p: (
        '{"role":"assistant","content":{"type":"text","text":"42"},"model":"reference-model","stopReason":"endTurn"}'
    ),
    "elicitation/create": lambda _m, _p: (
        '{"action":"accept","content":{"name":"Ada Lovelace","check":true,"number":2.5}}'
    ),
    "roots/list": lambda _m, _p: '{"roots":[{"uri":"file:///differential","name":"differential"}]}',
}


def start(server: wire.Server, workdir: Path, caps: str = "{}") -> wire.StdioWire:
    w = wire.StdioWire(server.argv, cwd=workdir, stderr=workdir / "stderr.log", env=server.env, handlers=HANDLERS)
    w.initialize(caps)
    return w


def show(w: wire.StdioWire, full: bool) -> None:
    for f in w.frames:
        text = f.text if full or len(f.text) <= 1500 else f.text[:1500] + f"... [{len(f.text)} characters]"
        print(">>" if f.direction == "out" else "<<", text)


def tool_names(w: wire.StdioWire) -> list[str]:
    msg = wire.parse(w.request("tools/list").text)
    return [t.get("name").value for t in msg.get("result").get("tools")]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what")
    ap.add_argument("arg", nargs="?")
    ap.add_argument("--full", action="store_true")
    ns = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="vigil-probe-"))
    ev = wire.everything()
    if ns.what == "capabilities":
        base: list[str] | None = None
        for label, caps in CAPABILITY_SETS.items():
            w = start(ev, work, caps)
            names = tool_names(w)
            base = base or names
            print(f"{label:18} {len(names):2} tools; beyond 'none': {[n for n in names if n not in base]}")
            w.close()
        return
    if ns.what == "tools":
        w = start(ev, work, ns.arg or "{}")
        tool_names(w)
    elif ns.what == "sampling":
        w = start(ev, work, '{"sampling":{}}')
        w.request(
            "tools/call", '{"name":"trigger-sampling-request","arguments":{"prompt":"What is 6 x 7?","maxTokens":50}}'
        )
    elif ns.what == "elicitation":
        w = start(ev, work, '{"elicitation":{"form":{}}}')
        w.request("tools/call", '{"name":"trigger-elicitation-request","arguments":{}}')
    elif ns.what == "gzip":
        w = start(ev, work)
        data = "data:text/plain;base64," + base64.b64encode(b"hello differential\n" * 10).decode()
        for output in ("resourceLink", "resource"):
            args = json.dumps({"name": "diff.txt.gz", "data": data, "outputType": output})
            w.request("tools/call", f'{{"name":"gzip-file-as-resource","arguments":{args}}}')
        w.request("resources/read", '{"uri":"demo://resource/session/diff.txt.gz"}')
    elif ns.what == "subscribe":
        w = start(ev, work)
        w.request("resources/subscribe", '{"uri":"demo://resource/static/document/architecture.md"}')
        seen = w.count_received()
        w.request("tools/call", '{"name":"toggle-subscriber-updates","arguments":{}}')
        w.wait_for(wire.is_method("notifications/resources/updated"), "an update", since=seen)
    elif ns.what == "progress":
        w = start(ev, work)
        w.request(
            "tools/call",
            '{"name":"trigger-long-running-operation","arguments":{"duration":0.4,"steps":2},'
            '"_meta":{"progressToken":"p-1"}}',
        )
    elif ns.what == "filesystem":
        line = 'Line with "quotes", a \\ backslash, a tab\t and UTF-8: äöü € 😀 — 0123456789\n'.encode()
        body = line * (3 * 1024 * 1024 // len(line))
        body += b"x" * (3 * 1024 * 1024 - len(body) - 1) + b"\n"
        (work / "big.txt").write_bytes(body)
        w = start(wire.filesystem(work), work)
        answer = w.request(
            "tools/call", json.dumps({"name": "read_text_file", "arguments": {"path": str(work / "big.txt")}})
        )
        result = wire.parse(answer.text).get("result")
        print(f"file: {len(body)} bytes; answer line: {len(answer.data)} bytes")
        print(f"result members: {result.keys_()}; content[0] members: {result.get('content')[0].keys_()}")
        print(f"structuredContent members: {result.get('structuredContent').keys_()}")
        print(f"content[0].text == file: {result.get('content')[0].get('text').value == body.decode()}")
        raw_utf8 = "😀" in answer.text and "\\u" not in answer.text
        print(f"non-ASCII written as raw UTF-8 (no \\u escapes): {raw_utf8}")
        w.close()
        return
    elif ns.what == "memory":
        w = start(wire.memory(work / "memory.jsonl"), work)
        w.request(
            "tools/call",
            '{"name":"create_entities","arguments":{"entities":[{"name":"Ada","entityType":"person",'
            '"observations":["wrote the first program"]}]}}',
        )
    elif ns.what == "time":
        w = start(wire.time_server(), work)
        w.request(
            "tools/call",
            '{"name":"convert_time","arguments":{"source_timezone":"Europe/Paris","time":"16:30",'
            '"target_timezone":"Asia/Tokyo"}}',
        )
    elif ns.what == "git":
        repo = work / "repo"
        subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
        subprocess.run(
            ["git", "-c", "user.name=Reference", "-c", "user.email=ref@example.invalid", "commit", "-q",
             "--allow-empty", "-m", "first"],
            cwd=repo, check=True,
        )  # fmt: skip
        w = start(wire.git_server(repo), work)
        w.request("tools/call", json.dumps({"name": "git_log", "arguments": {"repo_path": str(repo), "max_count": 1}}))
    else:
        sys.exit(f"unknown: {ns.what} (see the docstring)")
    w.close()
    show(w, ns.full)


if __name__ == "__main__":
    main()
