"""The demo's alert receiver: prints each health event Vigil's webhook
notifier POSTs to it, one line per event.

    python3 examples/alert-receiver.py [PORT]     # default 3903

Standard library only.
"""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer


class Alerts(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        try:
            event = json.loads(body)
            line = f"ALERT {event.get('severity', '?')}: {event.get('backend')} {event.get('from')} -> {event.get('to')}: {event.get('reason')}"
        except ValueError:
            line = f"ALERT (not JSON): {body[:200]!r}"
        print(line, flush=True)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def main() -> None:
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 3903
    print(f"alert receiver: printing Vigil's alerts (POST http://127.0.0.1:{port}/alerts)", flush=True)
    HTTPServer(("127.0.0.1", port), Alerts).serve_forever()


if __name__ == "__main__":
    main()
