"""A stdio MCP server that misbehaves on purpose, for Vigil's hardening tests.

Raw JSON-RPC lines on stdin/stdout (no SDK, so it can break the rules):

    python hostile_stdio.py [--hang-list-after N] [--bad-list MODE]
                            [--endless-pages] [--log-rate N]
                            [--grow-on-relist]

- Answers `initialize` (tools with `listChanged`, logging), `ping`,
  `tools/call` of `echo {text}` (answers `text`) and of `relist` (sends
  `notifications/tools/list_changed`, then answers `ok`).
- `--hang-list-after N`: answers the first N `tools/list` requests, then
  never answers another (0: never answers one).
- `--bad-list invalid-utf8|huge-line`: answers `tools/list` with a line that
  is not UTF-8, or with a 64 MiB line, instead of a usable answer.
- `--endless-pages`: every `tools/list` page holds 100 tools of about 1 KB
  and a `nextCursor`.
- `--log-rate N`: from `notifications/initialized` on, sends about N
  `notifications/message` per second for as long as it runs, and says on
  stderr every 10,000 (`flood sent K`).
- `--grow-on-relist`: each call of `relist` first adds a tool (`extra1`,
  `extra2`, ...) to what `tools/list` answers, so the change it announces
  is a real one.

Every `tools/list` it receives is counted on stderr (`tools/list #K`).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time

out_lock = threading.Lock()


def send(message: dict) -> None:
    line = json.dumps(message, separators=(",", ":")) + "\n"
    with out_lock:
        sys.stdout.write(line)
        sys.stdout.flush()


def send_raw(data: bytes) -> None:
    with out_lock:
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()


def flood(rate: int) -> None:
    """Sends about `rate` log messages per second, in bursts every 10 ms."""
    burst = max(1, rate // 100)
    n = 0
    while True:
        start = time.monotonic()
        for _ in range(burst):
            n += 1
            send(
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/message",
                    "params": {"level": "info", "logger": "flood", "data": f"flood message {n} " + "x" * 200},
                }
            )
            if n % 10000 == 0:
                print(f"flood sent {n}", file=sys.stderr, flush=True)
        rest = 0.01 - (time.monotonic() - start)
        if rest > 0:
            time.sleep(rest)


def tool(name: str, description: str) -> dict:
    return {"name": name, "description": description, "inputSchema": {"type": "object"}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hang-list-after", type=int, default=None)
    parser.add_argument("--bad-list", choices=["invalid-utf8", "huge-line"], default=None)
    parser.add_argument("--endless-pages", action="store_true")
    parser.add_argument("--log-rate", type=int, default=0)
    parser.add_argument("--grow-on-relist", action="store_true")
    args = parser.parse_args()

    listings = 0
    page = 0
    extras: list[dict] = []
    for raw in sys.stdin.buffer:
        try:
            msg = json.loads(raw)
        except ValueError:
            continue
        method = msg.get("method")
        mid = msg.get("id")
        if method == "initialize":
            version = msg.get("params", {}).get("protocolVersion", "2025-06-18")
            send(
                {
                    "jsonrpc": "2.0",
                    "id": mid,
                    "result": {
                        "protocolVersion": version,
                        "capabilities": {"tools": {"listChanged": True}, "logging": {}},
                        "serverInfo": {"name": "hostile", "version": "0.1.0"},
                    },
                }
            )
        elif method == "notifications/initialized":
            if args.log_rate > 0:
                threading.Thread(target=flood, args=(args.log_rate,), daemon=True).start()
        elif method == "ping":
            send({"jsonrpc": "2.0", "id": mid, "result": {}})
        elif method == "tools/list":
            listings += 1
            print(f"tools/list #{listings}", file=sys.stderr, flush=True)
            if args.hang_list_after is not None and listings > args.hang_list_after:
                continue
            if args.bad_list == "invalid-utf8":
                send_raw(
                    b'{"jsonrpc":"2.0","id":' + json.dumps(mid).encode() + b',"result":{"tools":[],"x":"\xff\xfe"}}\n'
                )
                continue
            if args.bad_list == "huge-line":
                send_raw(
                    b'{"jsonrpc":"2.0","id":'
                    + json.dumps(mid).encode()
                    + b',"result":{"tools":[],"x":"'
                    + b"y" * (64 << 20)
                    + b'"}}\n'
                )
                continue
            if args.endless_pages:
                page += 1
                tools = [tool(f"t{page}_{i}", "d" * 1000) for i in range(100)]
                send({"jsonrpc": "2.0", "id": mid, "result": {"tools": tools, "nextCursor": str(page)}})
                continue
            send(
                {
                    "jsonrpc": "2.0",
                    "id": mid,
                    "result": {
                        "tools": [tool("echo", "Echoes text"), tool("relist", "Announces a list change"), *extras]
                    },
                }
            )
        elif method == "tools/call":
            params = msg.get("params", {})
            name = params.get("name")
            if name == "relist":
                if args.grow_on_relist:
                    extras.append(tool(f"extra{len(extras) + 1}", "Added by relist"))
                send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
                text = "ok"
            elif name == "echo":
                text = str(params.get("arguments", {}).get("text", ""))
            else:
                send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32602, "message": f"unknown tool {name}"}})
                continue
            send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": text}]}})
        elif mid is not None and method is not None:
            send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": f"method {method} not found"}})


if __name__ == "__main__":
    main()
