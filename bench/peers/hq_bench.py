"""HyperQueue (``hq``): a server and one worker with ``--cpus N`` on loopback (W2, W3, W5).

The binary comes from $HQ_BIN (or PATH); build it from HyperQueue's repository (its pip package
ships only the Python API).  Clients and the worker reach the server at 127.0.0.1 (``--host``);
the connection is authenticated with hq's per-server keys.  Task stdout/stderr are discarded
(``none``) so that hq does not write 2 files per task while the Python peers write none.

W2: ``hq submit --array 1-N --wait /bin/true``.  W3: a job file with one ``[[task]]`` per
duration (``command = ["sleep", d]``), ``hq job submit-file`` then ``hq job wait``.
W5: server start -> worker start -> first ``/bin/true`` job finished, timed from the server launch.
"""

import os
import shutil
import subprocess
import time

from common import Runner, drive

HQ = os.environ.get("HQ_BIN") or shutil.which("hq") or "hq"


def hq_version():
    try:
        return subprocess.run([HQ, "--version"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "hq ?"


class HyperQueue(Runner):
    name = "HyperQueue"
    version = hq_version()
    supports = ("W5", "W2", "W3")

    def hq(self, *args, check=True):
        p = subprocess.run(
            [HQ, "--server-dir", self.dir, *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        if check and p.returncode != 0:
            raise RuntimeError(f"hq {' '.join(args)}: exit {p.returncode}: {p.stderr.strip()}")
        return p

    def start(self, slots, kind):
        work = os.environ.get("BENCH_WORKDIR", os.getcwd())
        self.dir = os.path.join(work, "hq-server")
        os.makedirs(self.dir, exist_ok=True)
        self.logs = [open(os.path.join(work, f"hq-{x}.log"), "w") for x in ("server", "worker")]
        self.procs = []
        self.t_launch = time.time()
        self.procs.append(
            subprocess.Popen(
                [HQ, "--server-dir", self.dir, "server", "start", "--host", "127.0.0.1"],
                stdout=self.logs[0],
                stderr=subprocess.STDOUT,
            )
        )
        access = os.path.join(self.dir, "hq-current", "access.json")
        deadline = time.time() + 30
        while not os.path.exists(access):
            if self.procs[0].poll() is not None or time.time() > deadline:
                raise RuntimeError("hq server did not start (see hq-server.log)")
            time.sleep(0.001)
        self.procs.append(
            subprocess.Popen(
                [HQ, "--server-dir", self.dir, "worker", "start", "--cpus", str(slots)]
                + ["--detect-resources", "none", "--manager", "none"],
                stdout=self.logs[1],
                stderr=subprocess.STDOUT,
            )
        )

    def stop(self):
        try:
            self.hq("server", "stop", check=False)
        finally:
            for p in self.procs:
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            for f in self.logs:
                f.close()

    def submit(self, n, *cmd):
        args = ["submit", "--stdout", "none", "--stderr", "none", "--wait"]
        if n > 1:
            args += ["--array", f"1-{n}"]
        self.hq(*args, "--", *cmd)
        return [0] * n

    def first(self):
        self.submit(1, "/bin/true")
        return 2

    def warmup(self, slots, dirpath):
        self.submit(slots, "/bin/true")  # hq spawns each task from its worker: nothing to warm
        return None

    def w2(self, n):
        return self.submit(n, "/bin/true")

    def w3(self, ds):
        path = os.path.join(os.path.dirname(self.dir), "w3-job.toml")
        with open(path, "w") as f:
            for d in ds:
                f.write(f'[[task]]\ncommand = ["sleep", "{d}"]\nstdout = "none"\nstderr = "none"\n')
        self.hq("job", "submit-file", path)
        self.hq("job", "wait", "last")
        return [0] * len(ds)


if __name__ == "__main__":
    drive(HyperQueue())
