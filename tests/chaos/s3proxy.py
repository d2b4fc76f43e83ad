#!/usr/bin/env python3
"""A fault proxy in front of an S3 server, for the chaos bed's S3 host.

  s3proxy.py --listen ADDR:PORT --upstream 127.0.0.1:PORT --control FILE

Listens on ADDR:PORT and relays each connection to the upstream server. The
first line of FILE, re-read for every new connection, is the mode; a fault
applies to the first request of a connection (the rest of it is relayed):

  pass          relay unchanged (also when FILE is missing or unreadable)
  down          the listener is closed: connections are refused, open ones
                cut (a server that went away); it listens again once the
                mode changes
  errors P      a connection's request is, with probability P, answered by
                the proxy with 503 SlowDown or 500 InternalError as S3 sends
                them (XML body, request id headers; no body to a HEAD), its
                own body read and dropped, the connection closed; the others
                pass
  slow SECONDS  a connection's request is held SECONDS before it is relayed
                (a server slow to answer; the bed throttles the link as well)

One line per injected fault on stdout ("down", "up", "503 PUT /bucket/key",
"held 2.0s GET /bucket/key")
so the harness can count them. The relay is byte for byte: the Host header
and the body reach the server unchanged, so signatures still verify there.
Only the Python standard library is used.
"""
import argparse
import random
import select
import socket
import sys
import threading
import time

ERRORS = [
    (503, "Slow Down", "SlowDown", "Please reduce your request rate."),
    (500, "Internal Server Error", "InternalError",
     "We encountered an internal error. Please try again."),
]


def read_mode(path):
    try:
        with open(path) as f:
            words = f.readline().split()
    except OSError:
        return ("pass", 0.0)
    if not words:
        return ("pass", 0.0)
    arg = float(words[1]) if len(words) > 1 else 0.0
    return (words[0], arg)


def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def read_head(sock):
    """The request's head (through the blank line) and what came after it,
    or (None, b"") when the peer closed first."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return None, b""
        data += chunk
        if len(data) > 1 << 20:
            return None, b""
    head, _, rest = data.partition(b"\r\n\r\n")
    return head + b"\r\n\r\n", rest


def header(head, name):
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == name:
            return v.strip().decode(errors="replace")
    return None


def request_name(head):
    """"PUT /bucket/key": the method and target of the request line."""
    return " ".join(head.split(b"\r\n")[0].decode(errors="replace").split()[:2])


def answer_error(client, head, rest, rng):
    """Answers the request with an S3 error after reading its body."""
    status, reason, code, message = rng.choice(ERRORS)
    name = request_name(head)
    if (header(head, b"expect") or "").lower() != "100-continue":
        left = int(header(head, b"content-length") or 0) - len(rest)
        client.settimeout(10)
        while left > 0:
            chunk = client.recv(min(left, 1 << 20))
            if not chunk:
                break
            left -= len(chunk)
    request_id = "%016X" % rng.getrandbits(64)
    host_id = "%032x" % rng.getrandbits(128)
    body = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>%s</Code>"
            "<Message>%s</Message><RequestId>%s</RequestId><HostId>%s</HostId></Error>" %
            (code, message, request_id, host_id)).encode()
    if name.startswith("HEAD "):
        body = b""  # S3 answers a HEAD with the status and headers alone
    client.sendall(b"HTTP/1.1 %d %s\r\nx-amz-request-id: %s\r\nx-amz-id-2: %s\r\n"
                   b"Content-Type: application/xml\r\nContent-Length: %d\r\n"
                   b"Connection: close\r\n\r\n" % (status, reason.encode(), request_id.encode(),
                                                  host_id.encode(), len(body)) + body)
    say("%d %s" % (status, name))


def relay(a, b, live):
    """Copies both ways until either side closes or the proxy goes down."""
    socks = [a, b]
    while live():
        r, _, _ = select.select(socks, [], [], 0.2)
        for s in r:
            try:
                data = s.recv(1 << 20)
            except OSError:
                return
            if not data:
                return
            (b if s is a else a).sendall(data)


class Proxy:
    def __init__(self, listen, upstream, control):
        self.listen, self.upstream, self.control = listen, upstream, control
        self.rng = random.Random()
        self.generation = 0  # bumped when the proxy goes down: open relays end

    def serve(self):
        while True:
            mode, _ = read_mode(self.control)
            if mode == "down":
                self.generation += 1
                say("down")
                while read_mode(self.control)[0] == "down":
                    time.sleep(0.1)
                say("up")
                continue
            self.accept_until_down()

    def accept_until_down(self):
        lsock = socket.socket()
        lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        lsock.bind(self.listen)
        lsock.listen(128)
        lsock.settimeout(0.2)
        try:
            while read_mode(self.control)[0] != "down":
                try:
                    client, _ = lsock.accept()
                except socket.timeout:
                    continue
                threading.Thread(target=self.handle, args=(client,), daemon=True).start()
        finally:
            lsock.close()

    def handle(self, client):
        gen = self.generation
        live = lambda: self.generation == gen  # noqa: E731
        try:
            mode, arg = read_mode(self.control)
            head, rest = (None, b"")
            if mode in ("errors", "slow"):
                head, rest = read_head(client)
                if head is None:
                    return
                if mode == "errors" and self.rng.random() < arg:
                    answer_error(client, head, rest, self.rng)
                    return
                if mode == "slow":
                    say("held %.1fs %s" % (arg, request_name(head)))
                    time.sleep(arg)
            server = socket.create_connection(self.upstream, timeout=10)
            server.settimeout(None)
            client.settimeout(None)
            with server:
                if head is not None:
                    server.sendall(head + rest)
                relay(client, server, live)
        except OSError:
            pass
        finally:
            client.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--listen", required=True)
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--control", required=True)
    a = ap.parse_args()

    def addr(s):
        host, _, port = s.rpartition(":")
        return (host, int(port))

    Proxy(addr(a.listen), addr(a.upstream), a.control).serve()


if __name__ == "__main__":
    main()
