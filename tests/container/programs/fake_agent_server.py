import http.server
import json
import os
import sys


class Fake(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _answer(self):
        with open(os.path.expanduser("~/fake.log"), "a") as log:
            log.write(json.dumps([self.command, self.path, self.headers.get("authorization")]) + "\n")
        length = int(self.headers.get("content-length") or 0)
        self.rfile.read(length)
        if self.path.startswith("/event"):
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.end_headers()
            self.wfile.write(b'data: {"type":"session.idle","properties":{"sessionID":"ses_fake"}}\n\n')
            return
        body = json.dumps({"id": "ses_fake", "healthy": True}).encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_DELETE = _answer


if os.fork() == 0:
    os.setsid()
    for fd in (0, 1, 2):
        os.dup2(os.open(os.devnull, os.O_RDWR), fd)
    http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Fake).serve_forever()
print("listening")
