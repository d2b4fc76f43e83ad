"""The S3 fault proxy: relays byte for byte, and injects exactly the fault
its control file names (refused connections, S3 errors, held requests)."""
import http.client
import http.server
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "harness"))
import loopback_ports  # noqa: E402 - the shared port picker of every suite

HERE = os.path.dirname(os.path.abspath(__file__))


class Echo(http.server.BaseHTTPRequestHandler):
    """Answers every request with its method, path, Host and body."""

    def _answer(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        out = b"%s %s %s " % (self.command.encode(), self.path.encode(),
                              (self.headers.get("Host") or "").encode()) + body
        self.send_response(200)
        self.send_header("Content-Length", str(len(out)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_PUT = _answer

    def log_message(self, *args):
        pass


def free_port():
    """A port in the cluster suites' range: this suite holds ctest's lock
    strata_cluster with them (tests/harness/loopback_ports.py)."""
    return loopback_ports.free_port(loopback_ports.CLUSTER)


@pytest.fixture
def proxy(tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    control = tmp_path / "mode"
    control.write_text("pass\n")
    port = free_port()
    log = open(tmp_path / "proxy.log", "w+")
    p = subprocess.Popen([sys.executable, os.path.join(HERE, "s3proxy.py"), "--listen",
                          "127.0.0.1:%d" % port, "--upstream",
                          "127.0.0.1:%d" % server.server_address[1], "--control", str(control)],
                         stdout=log)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        assert p.poll() is None, "the proxy exited: %s" % (tmp_path / "proxy.log").read_text()
        time.sleep(0.05)

    def set_mode(mode):
        (tmp_path / "mode.tmp").write_text(mode + "\n")
        os.replace(tmp_path / "mode.tmp", control)

    def request(method="PUT", path="/bucket/key", body=b"x" * 100000, headers=None):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request(method, path, body=body, headers={"Host": "s3.example:9000"})
        r = c.getresponse()
        if headers is not None:
            headers.update({k.lower(): v for k, v in r.getheaders()})
        return r.status, r.read()

    yield set_mode, request, lambda: (tmp_path / "proxy.log").read_text()
    p.kill()
    p.wait()
    server.shutdown()


def test_pass_relays_unchanged(proxy):
    _, request, _ = proxy
    status, body = request(body=b"abc" * 50000)
    assert status == 200
    assert body == b"PUT /bucket/key s3.example:9000 " + b"abc" * 50000


def test_errors_answer_in_s3_xml_after_reading_the_body(proxy):
    set_mode, request, log = proxy
    set_mode("errors 1.0")
    for _ in range(4):
        headers = {}
        status, body = request(headers=headers)
        assert status in (500, 503)
        assert b"<Code>SlowDown</Code>" in body or b"<Code>InternalError</Code>" in body
        # As S3 sends them: the request ids in the headers and the body.
        assert b"<RequestId>%s</RequestId>" % headers["x-amz-request-id"].encode() in body
        assert headers["x-amz-id-2"].encode() in body
    headers = {}
    status, body = request(method="HEAD", body=None, headers=headers)
    assert status in (500, 503) and body == b"" and "x-amz-request-id" in headers
    set_mode("errors 0.0")
    assert request()[0] == 200
    assert log().count("PUT /bucket/key") == 4
    assert log().count("HEAD /bucket/key") == 1


def test_down_refuses_until_the_mode_changes(proxy):
    set_mode, request, log = proxy
    set_mode("down")
    time.sleep(0.5)
    with pytest.raises(ConnectionRefusedError):
        request()
    set_mode("pass")
    deadline = time.monotonic() + 5
    while True:
        try:
            assert request()[0] == 200
            break
        except ConnectionRefusedError:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    assert log().splitlines()[:2] == ["down", "up"]


def test_slow_holds_each_request(proxy):
    set_mode, request, log = proxy
    set_mode("slow 0.5")
    t = time.monotonic()
    assert request(method="GET", body=None)[0] == 200
    assert time.monotonic() - t >= 0.5
    assert "held 0.5s GET /bucket/key" in log()
