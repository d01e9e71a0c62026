#!/usr/bin/python3
"""A tiny model server for the console's deployment test: the Open
Inference Protocol routes a deploy step's replica must answer (GET
/v2/health/ready, POST /v2/models/NAME/infer), with no scikit-learn, so
the page is tested against a real deployment (real replicas behind real
HAProxy) on a machine without the digits example's packages. Its
"prediction" is the number of input values; it answers with the version
it serves (FERRY_MODEL_VERSION) and refuses to start without its artifact.
"""
import http.server
import json
import os
import signal
import sys

NAME = os.environ.get("FERRY_MODEL_NAME", "tiny")
VERSION = os.environ.get("FERRY_MODEL_VERSION", "?")
ARTIFACT = os.environ.get("FERRY_MODEL_PATH", "")


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def reply(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path in ("/v2/health/live", "/v2/health/ready", f"/v2/models/{NAME}/ready"):
            self.reply(200, {"ready": True})
        else:
            self.reply(404, {"error": f"no route {self.path}"})

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        try:
            req = json.loads(self.rfile.read(n) or b"{}")
        except ValueError:
            self.reply(400, {"error": "the body is not JSON"})
            return
        if self.path != f"/v2/models/{NAME}/infer":
            self.reply(404, {"error": f"unknown model or route {self.path}"})
            return
        count = sum(len(i.get("data", [])) for i in req.get("inputs", []))
        self.reply(200, {"model_name": NAME, "model_version": VERSION,
                         "outputs": [{"name": "count", "shape": [1], "datatype": "INT64", "data": [count]}]})

    def log_message(self, *args):
        pass


def main():
    if not ARTIFACT or not os.path.exists(ARTIFACT):
        sys.exit(f"tiny_serve.py: no artifact at {ARTIFACT!r}")
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ.get("FERRY_PORT", "0"))), Handler)
    signal.signal(signal.SIGTERM, lambda *a: os._exit(0))
    print(f"tiny_serve.py: listening on http://127.0.0.1:{srv.server_address[1]}", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
