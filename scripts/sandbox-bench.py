#!/usr/bin/env python3
"""The cost of the sandbox per command: starts `true` N times unconfined and N times under bwrap
with the arguments the daemon gives a shell call (file system read-only, the project writable, a
private /tmp, the home's credential folders hidden, own pid, IPC and network namespaces),
alternately with `unshare -n true` (what an isolated shell call cost before the sandbox), and prints p50 and p99 of each in milliseconds. Usage: sandbox-bench.py [N]."""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

n = int(sys.argv[1]) if len(sys.argv) > 1 else 500
bwrap = shutil.which("bwrap")
if not bwrap:
    sys.exit("bwrap not found (scripts/install-test-deps.sh installs it)")
project = tempfile.mkdtemp()
home = os.path.expanduser("~")
confined = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-ipc",
            "--unshare-pid", "--die-with-parent", "--setenv", "TMPDIR", "/tmp", "--unshare-net",
            "--tmpfs", "/tmp"]
for zone in [".ssh", ".aws", ".config/gcloud", ".netrc", ".docker", ".kube", ".gnupg"]:
    path = os.path.realpath(os.path.join(home, zone))
    if os.path.isdir(path):
        confined += ["--tmpfs", path]
    elif os.path.exists(path):
        confined += ["--ro-bind", "/dev/null", path]
confined += ["--bind", project, project, "--chdir", project, "--", "true"]
plain = ["true"]
# What an isolated shell call cost before the sandbox: a network namespace of its own.
unshare = ["unshare", "-n" if os.geteuid() == 0 else "-rn", "--", "true"]


def once(cmd):
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=project)
    return (time.perf_counter() - t0) * 1000


times = {"unconfined": [], "unshare -n": [], "confined": []}
for _ in range(n):
    times["unconfined"].append(once(plain))
    times["unshare -n"].append(once(unshare))
    times["confined"].append(once(confined))
for name, ts in times.items():
    ts.sort()
    p99 = ts[min(len(ts) - 1, int(len(ts) * 0.99))]
    print(f"{name:10}  p50 {statistics.median(ts):6.2f} ms  p99 {p99:6.2f} ms  (n={n})")
os.rmdir(project)
