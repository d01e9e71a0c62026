#!/usr/bin/env python3
"""A fault in front of a real container engine: podman's service has been
known to keep a container's log stream open after the container exited
(podman#6627, #11461). This proxy listens on a unix socket, relays every
Engine API request to the real engine's socket byte for byte, except a
followed log (GET /containers/NAME/logs?follow=1…): its bytes are relayed
from the engine, and when the engine ends the stream the proxy keeps the
client's connection open, sending nothing more, until the client hangs up.
Each stream so held adds a line to HELD.

With MODE error-once, the first followed log is answered as podman's
service (4.3) answers one asked as its container ends: 200, then an error
as the body, no log frame; the next are relayed whole. That answer adds a
line to HELD.

Usage: engine_holdopen.py LISTEN_SOCK ENGINE_SOCK HELD [hold|error-once]
"""
import os
import socket
import socketserver
import sys
import threading

LISTEN, ENGINE, HELD = sys.argv[1:4]
MODE = sys.argv[4] if len(sys.argv) > 4 else "hold"
erred = threading.Lock()  # taken by the one answer that errs (error-once)
PODMAN_ERROR = (b'{"cause":"no such process","message":"failed to obtain logs for Container \'%s\': '
                b'read /proc/4242/cgroup: no such process","response":500}\n')


def relay(src, dst):
    try:
        while True:
            b = src.recv(65536)
            if not b:
                break
            dst.sendall(b)
    except OSError:
        pass
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def read_head(sock):
    buf = b""
    while b"\r\n\r\n" not in buf:
        b = sock.recv(65536)
        if not b:
            return None, buf
        buf += b
    return buf.split(b"\r\n", 1)[0].decode("latin-1"), buf


def read_chunked(up, rest):
    """Yields the payload of a chunked body from socket up (rest: bytes already read)."""
    buf = rest
    while True:
        while b"\r\n" not in buf:
            b = up.recv(65536)
            if not b:
                return
            buf += b
        line, buf = buf.split(b"\r\n", 1)
        size = int(line.split(b";")[0], 16)
        if size == 0:
            return
        while len(buf) < size + 2:
            b = up.recv(65536)
            if not b:
                yield buf
                return
            buf += b
        yield buf[:size]
        buf = buf[size + 2:]


def relay_both(client, up, head):
    """The request (head, then the rest) to the engine and its answer back, byte for byte."""
    up.sendall(head)
    t = threading.Thread(target=relay, args=(up, client), daemon=True)
    t.start()
    relay(client, up)
    t.join()
    up.close()


class Handler(socketserver.BaseRequestHandler):
    def handle(self):
        client = self.request
        line, head = read_head(client)
        if line is None:
            return
        up = socket.socket(socket.AF_UNIX)
        up.connect(ENGINE)
        parts = line.split(" ")
        if len(parts) < 2 or "/logs?" not in parts[1] or "follow=1" not in parts[1]:
            relay_both(client, up, head)
            return
        if MODE == "error-once":
            if not erred.acquire(blocking=False):
                relay_both(client, up, head)
                return
            name = parts[1].split("/containers/")[1].split("/")[0].encode()
            client.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.docker.raw-stream\r\n"
                           b"Connection: close\r\n\r\n" + PODMAN_ERROR % name)
            up.close()
            with open(HELD, "a") as f:
                f.write("error " + parts[1] + "\n")
            return
        # the followed log: one request, relayed; its end withheld
        up.sendall(head)
        uline, uhead = read_head(up)
        if uline is None:
            return
        hdr, rest = uhead.split(b"\r\n\r\n", 1)
        lower = hdr.lower()
        client.sendall(hdr.replace(b"Transfer-Encoding: chunked", b"X-Was: chunked")
                       .replace(b"transfer-encoding: chunked", b"x-was: chunked") + b"\r\n\r\n"
                       if b"transfer-encoding: chunked" in lower else uhead)
        if b"transfer-encoding: chunked" in lower:
            for payload in read_chunked(up, rest):
                client.sendall(payload)
        else:
            while True:
                b = up.recv(65536)
                if not b:
                    break
                client.sendall(b)
        up.close()
        with open(HELD, "a") as f:
            f.write(parts[1] + "\n")
        # the engine is done; the client is not told
        try:
            while client.recv(65536):
                pass
        except OSError:
            pass


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


if os.path.exists(LISTEN):
    os.unlink(LISTEN)
Server(LISTEN, Handler).serve_forever()
