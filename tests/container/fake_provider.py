"""A stand-in for an external OpenAI-compatible provider (container tests only; stdlib, run with
``python3 fake_provider.py PORT`` in the OpenCode env image).

``POST /v1/chat/completions`` answers "ok" (JSON or SSE) after ``DELAY_S`` and records the request's
``Authorization`` header; ``GET /seen`` returns the headers seen so far.
"""

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DELAY_S = 3.0
SEEN: list[str] = []
LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        with LOCK:
            self._send(200, json.dumps(SEEN).encode())

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
        with LOCK:
            SEEN.append(self.headers.get("authorization", ""))
        time.sleep(DELAY_S)
        message = {"role": "assistant", "content": "ok"}
        usage = {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
        if not request.get("stream"):
            self._send(
                200,
                json.dumps(
                    {
                        "id": "p",
                        "object": "chat.completion",
                        "model": request.get("model"),
                        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                        "usage": usage,
                    }
                ).encode(),
            )
            return
        chunks = [
            {"choices": [{"index": 0, "delta": message, "finish_reason": None}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": usage},
        ]
        body = (
            b"".join(
                b"data: " + json.dumps({"id": "p", "object": "chat.completion.chunk", **c}).encode() + b"\n\n"
                for c in chunks
            )
            + b"data: [DONE]\n\n"
        )
        self._send(200, body, "text/event-stream")

    def log_message(self, *args: object) -> None:
        pass


if __name__ == "__main__":
    ThreadingHTTPServer(("0.0.0.0", int(sys.argv[1])), Handler).serve_forever()
