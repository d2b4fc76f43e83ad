"""The chaos bed's S3 host: a real S3 server (moto, signatures and IAM
policies checked) behind a fault proxy, in a namespace of its own.

  s3 = S3Host(bed, "s3", work)    # the bed must have a host named "s3"
  s3.start()                      # moto on :5000, the proxy on :9000
  env = s3.client_env()           # AWS_* for the agents: through the proxy
  s3.set_mode("errors 0.5")       # see s3proxy.py; "pass" heals
  s3.objects()                    # {key: (etag, size, last modified)}, read past the proxy

moto starts with authentication off while the harness creates the user
"strata" (allowed everything) over moto's IAM API and the bucket; then every
request's signature and policy are checked, as in tests/harness/moto.cc. The
harness lists objects from the root namespace straight at moto (port 5000),
so its checks never meet the proxy's faults.
"""
import os
import re
import shutil
import subprocess
import urllib.parse
import urllib.request

import netbed

MOTO_PORT = 5000
PROXY_PORT = 9000
REGION = "us-east-1"
BUCKET = "chaos"
POLICY = '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"*","Resource":"*"}]}'


# The project's Python environment (scripts/python-env.sh): where the install
# step puts moto_server and the aws CLI.
VENV_BIN = os.path.join(os.environ.get("STRATA_VENV") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", ".venv"), "bin")


def find_tool(name):
    """In the project's environment, else on PATH, as tests/harness/moto.cc finds them."""
    return shutil.which(name, path=VENV_BIN) or shutil.which(name)


class S3Host:
    def __init__(self, bed, host, work):
        self.bed, self.host, self.work = bed, host, work
        self.control = os.path.join(work, "s3.mode")
        self.proxy_log = os.path.join(work, "s3proxy.log")
        self.key = self.secret = None

    @property
    def moto_url(self):
        return "http://%s:%d" % (self.bed.address(self.host), MOTO_PORT)

    @property
    def url(self):
        """What the agents use: the proxy."""
        return "http://%s:%d" % (self.bed.address(self.host), PROXY_PORT)

    def start(self):
        moto = find_tool("moto_server")
        if not moto:
            raise RuntimeError("moto_server not found (pip install 'moto[server]')")
        self.set_mode("pass")
        p = self.bed.spawn(self.host, [moto, "-H", "0.0.0.0", "-p", str(MOTO_PORT)],
                           log=os.path.join(self.work, "moto.log"),
                           env=dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT="1000000"))
        netbed.wait_for(lambda: p.poll() is not None or self._get("/moto-api/") is not None, 60,
                        0.2)
        if p.poll() is not None or self._get("/moto-api/") is None:
            raise RuntimeError("moto_server on the S3 host did not start (see %s/moto.log)" %
                               self.work)
        self._iam("Action=CreateUser&UserName=strata")
        xml = self._iam("Action=CreateAccessKey&UserName=strata")
        self.key = re.search(r"<AccessKeyId>([^<]+)", xml).group(1)
        self.secret = re.search(r"<SecretAccessKey>([^<]+)", xml).group(1)
        self._iam("Action=PutUserPolicy&UserName=strata&PolicyName=all&PolicyDocument=" +
                  urllib.parse.quote(POLICY, safe=""))
        self._curl(["-X", "POST", "-H", "Content-Type: text/plain", "--data", "0",
                    self.moto_url + "/moto-api/reset-auth"])
        self._curl(["--aws-sigv4", "aws:amz:%s:s3" % REGION, "-u", "%s:%s" % (self.key, self.secret),
                    "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", "-X", "PUT",
                    "%s/%s" % (self.moto_url, BUCKET)])
        proxy = os.path.join(os.path.dirname(os.path.abspath(__file__)), "s3proxy.py")
        p = self.bed.spawn(self.host, [
            "python3", proxy, "--listen", "%s:%d" % (self.bed.address(self.host), PROXY_PORT),
            "--upstream", "127.0.0.1:%d" % MOTO_PORT, "--control", self.control],
            log=self.proxy_log)
        up = lambda: self.bed.reachable(self.host, self.host, PROXY_PORT)  # noqa: E731
        netbed.wait_for(lambda: p.poll() is not None or up(), 30)
        if p.poll() is not None or not up():
            raise RuntimeError("the S3 fault proxy did not start (see %s)" % self.proxy_log)

    def client_env(self, url=None):
        """AWS_* for a client of `url` (default: the proxy), isolated from
        any configuration of the machine, as tests/harness/moto.cc's AwsEnv."""
        return {"AWS_ENDPOINT_URL": url or self.url, "AWS_REGION": REGION,
                "AWS_DEFAULT_REGION": REGION, "AWS_ACCESS_KEY_ID": self.key,
                "AWS_SECRET_ACCESS_KEY": self.secret, "AWS_SESSION_TOKEN": "",
                "AWS_CONFIG_FILE": "/dev/null", "AWS_SHARED_CREDENTIALS_FILE": "/dev/null"}

    def set_mode(self, mode):
        tmp = self.control + ".tmp"
        with open(tmp, "w") as f:
            f.write(mode + "\n")
        os.replace(tmp, self.control)

    def injected(self):
        """Faults the proxy injected so far: {"down": n, "errors": n, "held": n}."""
        out = {"down": 0, "errors": 0, "held": 0}
        try:
            with open(self.proxy_log) as f:
                for line in f:
                    word = line.split(" ", 1)[0]
                    if word == "down":
                        out["down"] += 1
                    elif word in ("500", "503"):
                        out["errors"] += 1
                    elif word == "held":
                        out["held"] += 1
        except OSError:
            pass
        return out

    def objects(self):
        """Every object of the bucket: {key: (etag, size, last modified)}."""
        aws = find_tool("aws")
        if not aws:
            raise RuntimeError("listing s3://%s: the aws CLI was not found" % BUCKET)
        r = subprocess.run([aws, "s3api", "list-objects-v2", "--bucket", BUCKET, "--output", "text",
                            "--query", "Contents[].[Key,ETag,Size,LastModified]",
                            "--endpoint-url", self.moto_url], capture_output=True, text=True,
                           timeout=120, env=dict(os.environ, **self.client_env(self.moto_url)))
        if r.returncode != 0:
            raise RuntimeError("listing s3://%s: %s" % (BUCKET, r.stderr.strip()))
        out = {}
        for line in r.stdout.splitlines():
            parts = line.split("\t")
            if len(parts) == 4:
                out[parts[0]] = tuple(parts[1:])
        return out

    def _get(self, path):
        try:
            with urllib.request.urlopen(self.moto_url + path, timeout=2) as r:
                return r.read()
        except OSError:
            return None

    def _iam(self, form):
        return self._curl(["--aws-sigv4", "aws:amz:%s:iam" % REGION, "-u", "setup:setup", "-X",
                           "POST", "-H", "Content-Type: application/x-www-form-urlencoded",
                           "--data", form + "&Version=2010-05-08", self.moto_url + "/"])

    def _curl(self, args):
        r = subprocess.run(["curl", "-s", "-S", "--fail-with-body", *args], capture_output=True,
                           text=True, timeout=60)
        if r.returncode != 0:
            raise RuntimeError("curl %s: %s %s" % (args[-1], r.stderr.strip(), r.stdout[:300]))
        return r.stdout
