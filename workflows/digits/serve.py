#!/usr/bin/python3
"""Serve a trained digits model over the Open Inference Protocol (v2).

The model server a `deploy` step starts as a replica. It loads the
model.pkl written by train.py (a file, or the directory holding it) and
answers, on HTTP/1.1 with keep-alive:

  GET  /v2/health/live             200 as soon as the process serves
  GET  /v2/health/ready            200 once the model is loaded, else 503
  GET  /v2/models/NAME             metadata: versions, platform, inputs, outputs
  GET  /v2/models/NAME/ready       as /v2/health/ready, for this model
  POST /v2/models/NAME/infer       {"inputs":[{"name":"input-0","shape":[N,64],
                                     "datatype":"FP32","data":[N*64 numbers]}]}
                                   -> {"outputs":[{"name":"label","shape":[N],
                                     "datatype":"INT64","data":[N digits]}]}

Each input row is one 8x8 image as scikit-learn's load_digits gives it:
64 pixel intensities 0-16, row by row ("data" flat or nested). The server
scales them as common.load_split does for training. Bad requests get 400
with {"error": "..."} naming what is wrong; an unknown model 404.

Settings come from arguments or, when absent, from the environment Ferry
sets for a replica: --model / FERRY_MODEL_PATH, --name / FERRY_MODEL_NAME
(default digits), --port / FERRY_PORT (0 picks a free port), --host
/ FERRY_BIND_ADDR (default 127.0.0.1), --version / FERRY_MODEL_VERSION. The address served
is printed as one line, "serve.py: listening on http://HOST:PORT".

SIGTERM or SIGINT stops accepting connections, lets the requests in
flight finish (idle keep-alive connections are closed) and exits 0.
Requests are not logged unless --verbose, so a load test does not fill
the replica's log.
"""
import argparse
import json
import math
import os
import pickle
import re
import select
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FEATURES = 64                     # 8x8 pixels
PIXEL_MAX = 16.0                  # load_digits' intensity scale (train.py divides by it)
MAX_BODY = 16 * 1024 * 1024       # bytes of one request body
IDLE_TICK = 0.25                  # seconds between checks of the stop flag on an idle connection
IO_TIMEOUT = 30.0                 # a client that stalls mid-request is dropped after this
NUMERIC = {"FP16", "FP32", "FP64", "INT8", "INT16", "INT32", "INT64",
           "UINT8", "UINT16", "UINT32", "UINT64"}


class BadRequest(Exception):
    """A client error: answered with this status and {"error": message}."""

    def __init__(self, message, status=400):
        super().__init__(message)
        self.status = status


def find_model(path):
    """The model file: path itself, or model.pkl (or the only *.pkl) inside a directory."""
    if not os.path.isdir(path):
        return path
    candidate = os.path.join(path, "model.pkl")
    if os.path.exists(candidate):
        return candidate
    pkls = sorted(p for p in os.listdir(path) if p.endswith(".pkl"))
    if len(pkls) == 1:
        return os.path.join(path, pkls[0])
    raise FileNotFoundError(f"{path}: a directory without model.pkl "
                            f"({len(pkls)} other .pkl files)")


def flatten(data, out):
    """Appends the numbers of a (possibly nested) list to out; raises BadRequest on anything else."""
    for v in data:
        if isinstance(v, list):
            flatten(v, out)
        elif isinstance(v, bool) or not isinstance(v, (int, float)):
            raise BadRequest(f"inputs[0].data holds {json.dumps(v)[:40]}; "
                             f"expected numbers (pixel intensities 0-16)")
        elif not math.isfinite(v):
            raise BadRequest("inputs[0].data holds a number that is not finite")
        else:
            out.append(v)


def parse_infer(body):
    """(request id or None, rows: list of N lists of 64 floats) of an infer request body."""
    try:
        req = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRequest(f"the body is not valid JSON: {e}")
    if not isinstance(req, dict):
        raise BadRequest("the body must be a JSON object with \"inputs\"")
    rid = req.get("id")
    if rid is not None and not isinstance(rid, str):
        raise BadRequest("id must be a string")
    inputs = req.get("inputs")
    if not isinstance(inputs, list) or not inputs:
        raise BadRequest("inputs must be a non-empty list of tensors")
    if len(inputs) != 1:
        raise BadRequest(f"inputs has {len(inputs)} tensors; this model takes one, [N, {FEATURES}]")
    t = inputs[0]
    if not isinstance(t, dict):
        raise BadRequest("inputs[0] must be an object with name, shape, datatype and data")
    for key in ("name", "shape", "datatype", "data"):
        if key not in t:
            raise BadRequest(f"inputs[0].{key} is missing")
    if not isinstance(t["name"], str):
        raise BadRequest("inputs[0].name must be a string")
    dt = t["datatype"]
    if dt not in NUMERIC:
        raise BadRequest(f"inputs[0].datatype {json.dumps(dt)[:40]} is not numeric; use FP32")
    shape = t["shape"]
    if (not isinstance(shape, list) or len(shape) != 2
            or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape)):
        raise BadRequest(f"inputs[0].shape must be [N, {FEATURES}], not {json.dumps(shape)[:40]}")
    n, width = shape
    if width != FEATURES:
        raise BadRequest(f"inputs[0].shape is {json.dumps(shape)}: each row is one 8x8 image, "
                         f"{FEATURES} values")
    if n < 1:
        raise BadRequest(f"inputs[0].shape is {json.dumps(shape)}: N must be 1 or more")
    data = t["data"]
    if not isinstance(data, list):
        raise BadRequest("inputs[0].data must be a list of numbers")
    flat = []
    flatten(data, flat)
    if len(flat) != n * FEATURES:
        raise BadRequest(f"inputs[0].data has {len(flat)} numbers; shape {json.dumps(shape)} "
                         f"needs {n * FEATURES}")
    rows = [[v / PIXEL_MAX for v in flat[i * FEATURES:(i + 1) * FEATURES]] for i in range(n)]
    return rid, rows


class Server(ThreadingHTTPServer):
    # Handler threads are joined by server_close(): requests in flight finish.
    daemon_threads = False
    block_on_close = True
    allow_reuse_address = True
    # socketserver's backlog is 5: a burst of new connections (a load test
    # opening 16 at once) overflows it and the dropped SYNs wait 1 s to retry
    request_queue_size = 128

    def __init__(self, addr, opts):
        super().__init__(addr, Handler)
        self.opts = opts
        self.model = None
        self.load_error = None
        self.stopping = threading.Event()

    def load(self):
        """Loads the model (in a thread: live answers meanwhile); a failure stops the server."""
        try:
            path = find_model(self.opts.model)
            with open(path, "rb") as f:
                model = pickle.load(f)
            if not hasattr(model, "predict"):
                raise TypeError(f"{path} holds a {type(model).__name__}, not a model")
            model.predict([[0.0] * FEATURES])  # fail now, not at the first request
            self.model = model
            say(f"model {self.opts.name} loaded from {path}")
        except Exception as e:  # anything: the replica cannot serve
            self.load_error = f"cannot load the model: {e}"
            say(self.load_error)
            self.stop()

    def stop(self):
        """Stops serve_forever from any thread but its own (signal handlers run on it)."""
        if not self.stopping.is_set():
            self.stopping.set()
            threading.Thread(target=self.shutdown, daemon=True).start()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"   # keep-alive
    # headers and body go out in separate writes: without TCP_NODELAY, Nagle
    # holds the body until the client's delayed ACK (40 ms per request)
    disable_nagle_algorithm = True
    server_version = "ferry-digits/1"
    timeout = IO_TIMEOUT

    def handle(self):
        self.close_connection = True
        while self.wait_for_request():
            self.handle_one_request()
            if self.close_connection:
                break

    def wait_for_request(self):
        """Whether a request (or EOF) is there to read; False once the server stops while idle."""
        while True:
            if select.select([self.connection], [], [], IDLE_TICK)[0]:
                return True
            if self.buffered():
                return True
            if self.server.stopping.is_set():
                return False

    def buffered(self):
        """Whether rfile already holds bytes of a pipelined request (never blocks)."""
        self.connection.settimeout(0)
        try:
            return len(self.rfile.peek(1)) > 0
        except OSError:
            return False
        finally:
            self.connection.settimeout(self.timeout)

    def log_message(self, fmt, *args):
        if self.server.opts.verbose:
            sys.stderr.write("serve.py: %s %s\n" % (self.address_string(), fmt % args))

    def reply(self, status, obj):
        body = json.dumps(obj, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if self.close_connection or self.server.stopping.is_set():
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def model_path(self, path):
        """(rest, found) for /v2/models/NAME[/versions/V][rest]; 404 for another name or version."""
        m = re.fullmatch(r"/v2/models/([^/]+)(?:/versions/([^/]+))?(/[a-z]+)?", path)
        if m is None:
            raise BadRequest(f"no such route: {path[:80]}", 404)
        name, version, rest = m.groups()
        opts = self.server.opts
        if name != opts.name:
            raise BadRequest(f"no model {name[:40]!r} here; this server serves {opts.name!r}", 404)
        if version is not None and version != opts.version:
            raise BadRequest(f"no version {version[:40]!r} of {opts.name}; "
                             f"this server has {opts.version!r}", 404)
        return rest or ""

    def route(self, method, body):
        path = self.path.split("?", 1)[0]
        srv = self.server
        if method == "GET":
            if path == "/v2/health/live":
                return 200, {"live": True}
            if path == "/v2/health/ready":
                return (200, {"ready": True}) if srv.model else (503, {"ready": False})
            if path == "/v2":
                return 200, {"name": "ferry-digits", "version": "1", "extensions": []}
        if not path.startswith("/v2/models/"):
            raise BadRequest(f"no such route: {method} {path[:80]}", 404)
        rest = self.model_path(path)
        if method == "GET" and rest == "":
            opts = srv.opts
            return 200, {"name": opts.name, "versions": [opts.version], "platform": "sklearn",
                         "inputs": [{"name": "input-0", "datatype": "FP32", "shape": [-1, FEATURES]}],
                         "outputs": [{"name": "label", "datatype": "INT64", "shape": [-1]}]}
        if method == "GET" and rest == "/ready":
            return (200, {"name": srv.opts.name, "ready": True}) if srv.model else \
                (503, {"name": srv.opts.name, "ready": False})
        if rest == "/infer":
            if method != "POST":
                raise BadRequest("infer takes POST", 405)
            return self.infer(body)
        raise BadRequest(f"no such route: {method} {path[:80]}", 404)

    def read_body(self):
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            self.close_connection = True
            raise BadRequest("chunked bodies are not accepted; send Content-Length", 411)
        length = self.headers.get("Content-Length")
        if length is None:
            self.close_connection = True
            raise BadRequest("Content-Length is required", 411)
        try:
            n = int(length)
        except ValueError:
            n = -1
        if n < 0 or n > MAX_BODY:
            self.close_connection = True
            raise BadRequest(f"Content-Length {length[:20]} is not 0-{MAX_BODY}", 413 if n > 0 else 400)
        body = self.rfile.read(n)
        if len(body) != n:
            self.close_connection = True
            raise BadRequest("the body ended early")
        return body

    def infer(self, body):
        rid, rows = parse_infer(body)
        model = self.server.model
        if model is None:
            return 503, {"error": f"model {self.server.opts.name} is not loaded yet"}
        labels = [int(v) for v in model.predict(rows)]
        out = {"model_name": self.server.opts.name, "model_version": self.server.opts.version,
               "outputs": [{"name": "label", "shape": [len(labels)], "datatype": "INT64",
                            "data": labels}]}
        if rid is not None:
            out["id"] = rid
        return 200, out

    def dispatch(self, method):
        try:
            # the body is read first, whatever the answer, so a kept-alive
            # connection stays in step with the client
            body = self.read_body() if method in ("POST", "PUT") else b""
            status, obj = self.route(method, body)
        except BadRequest as e:
            status, obj = e.status, {"error": str(e)}
        except Exception as e:  # a bug or a model failure: the replica stays up
            say(f"error on {method} {self.path[:80]}: {e!r}")
            status, obj = 500, {"error": f"internal error: {type(e).__name__}"}
        self.reply(status, obj)

    def do_GET(self):
        self.dispatch("GET")

    def do_HEAD(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def do_PUT(self):
        self.dispatch("PUT")

    def do_DELETE(self):
        self.dispatch("DELETE")


def say(msg):
    sys.stderr.write(f"serve.py: {msg}\n")
    sys.stderr.flush()


def main():
    env = os.environ.get
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=env("FERRY_MODEL_PATH"),
                    help="model.pkl or the directory holding it (FERRY_MODEL_PATH)")
    ap.add_argument("--name", default=env("FERRY_MODEL_NAME") or "digits",
                    help="the model name in URLs (FERRY_MODEL_NAME; digits)")
    ap.add_argument("--version", default=env("FERRY_MODEL_VERSION") or "1",
                    help="the version reported (FERRY_MODEL_VERSION; 1)")
    ap.add_argument("--port", type=int, default=None, help="port (FERRY_PORT; 0 picks a free one)")
    ap.add_argument("--host", default=env("FERRY_BIND_ADDR") or "127.0.0.1",
                    help="the address to listen on (FERRY_BIND_ADDR: the host's, where the fleet reaches it; 127.0.0.1)")
    ap.add_argument("--verbose", action="store_true", help="log every request to stderr")
    opts = ap.parse_args()
    if not opts.model:
        ap.error("no model: give --model PATH or set FERRY_MODEL_PATH")
    if opts.port is None:
        try:
            opts.port = int(env("FERRY_PORT", ""))
        except ValueError:
            ap.error("no port: give --port N or set FERRY_PORT")
    if not 0 <= opts.port <= 65535 or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", opts.name):
        ap.error("--port must be 0-65535 and --name 1-64 of letters, digits, _ . -")

    try:
        srv = Server((opts.host, opts.port), opts)
    except OSError as e:
        say(f"cannot listen on {opts.host}:{opts.port}: {e.strerror}")
        return 1
    host, port = srv.server_address[:2]
    print(f"serve.py: listening on http://{host}:{port}", flush=True)

    def on_signal(signum, frame):
        srv.stop()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    threading.Thread(target=srv.load, daemon=True).start()
    started = time.monotonic()
    srv.serve_forever(poll_interval=IDLE_TICK)
    srv.server_close()          # stops accepting, then joins the handlers in flight
    if srv.load_error:
        return 1
    say(f"stopped after {time.monotonic() - started:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
