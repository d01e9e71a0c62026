#!/usr/bin/env python3
# The integration suite's `json EXPR` (lib.sh) as a server: one Python for
# the whole run instead of one per call. Starting python3 costs about 150 ms
# of CPU on the 2-core test machine and the tests call `json` hundreds of
# times, many in polling loops; bash reaches this over /dev/tcp with no
# process started.
#
# Usage: json_eval.py FILE — listens on 127.0.0.1 (a port the kernel picks),
# writes "PORT TOKEN" to FILE (mode 0600) and serves until killed.
# A request: TOKEN "\n" LEN_EXPR " " LEN_INPUT "\n" EXPR INPUT (lengths in
# bytes); the answer: "0\n" and what `json` prints, or "1\n" and the error,
# then the connection closes. A request without the token is closed unanswered.
import json
import os
import secrets
import socketserver
import sys
import traceback


def evaluate(expr, text):
    j = json.loads(text)
    r = eval(expr, {"json": json, "sys": sys, "j": j})
    return r if not isinstance(r, (dict, list, bool)) and r is not None else json.dumps(r)


class Handler(socketserver.StreamRequestHandler):
    def handle(self):
        if self.rfile.readline().rstrip(b"\n") != TOKEN.encode():
            return
        try:
            n_expr, n_in = (int(x) for x in self.rfile.readline().split())
            expr = self.rfile.read(n_expr).decode()
            text = self.rfile.read(n_in).decode()
        except ValueError:
            return
        try:
            out = b"0\n" + (str(evaluate(expr, text)) + "\n").encode()
        except Exception:  # what python3 -c would print, and its status
            out = b"1\n" + traceback.format_exc().encode()
        self.wfile.write(out)


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64


TOKEN = secrets.token_hex(16)

if __name__ == "__main__":
    srv = Server(("127.0.0.1", 0), Handler)
    tmp = sys.argv[1] + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, f"{srv.server_address[1]} {TOKEN}\n".encode())
    os.close(fd)
    os.rename(tmp, sys.argv[1])
    srv.serve_forever()
