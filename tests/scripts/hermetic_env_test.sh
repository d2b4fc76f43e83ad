#!/usr/bin/env bash
# Everything the suite runs comes from what scripts/install-deps.sh installed:
# Debian's packages and the project's Python environment, nothing the machine
# image happens to carry (pyenv's shims, /usr/local, another site-packages).
# Usage: hermetic_env_test.sh VENV
#
# Fails, naming the tool or module, when
#   * a tool the suite starts resolves on PATH to a file that is neither in
#     VENV/bin nor owned by a Debian package,
#   * VENV was not made from Debian's /usr/bin/python3, or sees the system's
#     site-packages,
#   * its interpreter can import from outside VENV and the standard library,
#   * an installed package's version differs from python/requirements.lock.
set -uo pipefail
venv="${1:?usage: hermetic_env_test.sh VENV}"
repo="$(cd "$(dirname "$0")/../.." && pwd)"
fail=0
bad() { echo "FAIL: $*"; fail=1; }

# Tools the tests, the demo and the benches start by name.
for tool in python3 python pytest moto_server aws cmake ninja c++ clang++ curl prometheus \
            ip tc bash setsid; do
  path="$(command -v "$tool")" || { bad "$tool is not on PATH ($PATH)"; continue; }
  real="$(readlink -f "$path")"
  case "$path" in
    "$venv"/bin/*) continue ;;
  esac
  owned=0
  # Debian 12 merges /bin into /usr/bin: dpkg may know a file by either name.
  for f in "$path" "$real" "${path#/usr}" "${real#/usr}"; do
    dpkg -S "$f" >/dev/null 2>&1 && { owned=1; break; }
  done
  if [ "$owned" -eq 0 ]; then
    bad "$tool resolves to $path ($real), which no Debian package owns and is not in $venv/bin"
  fi
done
case ":$PATH:" in
  *pyenv*) bad "PATH names pyenv: $PATH" ;;
esac

cfg="$venv/pyvenv.cfg"
[ -f "$cfg" ] || { bad "$venv is not a virtual environment (no pyvenv.cfg)"; exit 1; }
grep -qx 'home = /usr/bin' "$cfg" || bad "$venv was not made from /usr/bin/python3: $(grep home "$cfg")"
grep -qx 'include-system-site-packages = false' "$cfg" || bad "$venv sees the system's site-packages"

# sys.path: the venv and the standard library of Debian's interpreter only.
"$venv/bin/python" - "$venv" <<'PY' || fail=1
import sys, os
venv = os.path.realpath(sys.argv[1])
allowed = (venv, "/usr/lib/python3.11", "/usr/lib/python3/dist-packages/_distutils_hack")
stray = [p for p in sys.path if p and os.path.exists(p)
         and not os.path.realpath(p).startswith(allowed)
         and not p.endswith(".zip")]
# Debian's interpreter adds its own dist-packages only outside a venv.
for p in stray:
    print(f"FAIL: {sys.executable} imports from {p}, outside the environment")
sys.exit(1 if stray else 0)
PY

# Installed versions are the locked ones, no more and no fewer packages.
"$venv/bin/python" - "$repo/python/requirements.lock" <<'PY' || fail=1
import re, sys
from importlib import metadata
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
locked = {}
for line in open(sys.argv[1]):
    m = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s\\]+)", line)
    if m:
        locked[norm(m.group(1))] = m.group(2)
have = {norm(d.metadata["Name"]): d.version for d in metadata.distributions()}
have.pop("pip", None)
errors = [f"{n} {v} is installed, the lock has {locked.get(n, 'no such package')}"
          for n, v in sorted(have.items()) if locked.get(n) != v]
errors += [f"{n} {v} is locked but not installed" for n, v in sorted(locked.items()) if n not in have]
for e in errors:
    print("FAIL:", e)
sys.exit(1 if errors else 0)
PY

[ "$fail" -eq 0 ] && echo "hermetic: every tool from Debian's packages or $venv, $(grep -c '^[A-Za-z]' "$repo/python/requirements.lock") locked packages as pinned"
exit "$fail"
