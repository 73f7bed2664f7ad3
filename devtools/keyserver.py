"""A small real HTTP service for the tests that honours idempotency keys, as
a payment API does: a POST with an `Idempotency-Key` it has seen gets the
first answer again and has no second effect; without a key every POST has
its effect. In a thread of the caller, on loopback."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from devtools.ports import free_port


class KeyServer:
    """`with KeyServer() as service:` — service.url, .requests (key or None
    per POST), .effects (the bodies applied, once per key)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/charge"
        self.requests: list[str | None] = []
        self.effects: list[dict] = []
        self.answers: dict[str, bytes] = {}
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                key = self.headers.get("Idempotency-Key")
                with server.lock:
                    server.requests.append(key)
                    if key is None or key not in server.answers:
                        server.effects.append(body)
                        answer = json.dumps({"effect": len(server.effects)}).encode()
                        if key is not None:
                            server.answers[key] = answer
                    else:
                        answer = server.answers[key]
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> "KeyServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
