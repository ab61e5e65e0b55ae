"""Command-line peers, timed as whole tool runs (W2, W3, W5 only).

xargs:    W2 ``seq N | xargs -P2 -I{} /bin/true``; W3 the durations on stdin, ``xargs -P100 -n1 sleep``.
parallel: the same with ``parallel --will-cite -jN`` (W2 with ``-N0``).
shoal:    ``shoal run TASKFILE -j N --discard-output --no-progress --no-summary``, one line per
          task (``/bin/true`` or ``sleep d``, run with /bin/sh -c as GNU parallel does); its wall
          time includes starting shoal's head, agent and teardown, unlike the Executor runs.
W5: the tool started cold to run one ``/bin/true``.

W2 runs ``/bin/true`` without an argument, as every other peer does (``Command(["/bin/true"])``,
``subprocess.run(["/bin/true"])``, hq's array job): coreutils' ``true`` given exactly one
argument looks for ``--help``/``--version`` and first calls ``setlocale(LC_ALL, "")``, which
under ``LANG=C.UTF-8`` opens and maps the locale's files (110 system calls instead of 31,
0.2-0.27 ms more of the command's CPU on the 2-core VM: 0.77 against 0.54 ms). Until 2026-11-29 these three
peers ran ``/bin/true N`` (one input line as its argument) and so a dearer command than the
others in W2.
"""

import os
import subprocess
import sys
import time

from common import Runner, drive, parse_args


def tool_version(tool):
    if tool == "shoal":
        try:
            import importlib.metadata as md

            return "shoal " + md.version("shoal")
        except Exception:
            return "shoal"
    try:
        out = subprocess.run([tool, "--version"], capture_output=True, text=True).stdout
        return out.splitlines()[0].strip()
    except Exception:
        return tool


class CmdLine(Runner):
    supports = ("W5", "W2", "W3")

    def __init__(self, tool):
        self.tool = tool
        self.name = {"xargs": "xargs -P", "parallel": "GNU parallel", "shoal": "shoal run"}[tool]
        self.version = tool_version(tool)

    def argv(self, slots, cmd, pass_line):
        """``pass_line``: each input line is the command's argument (else it only counts)."""
        if self.tool == "xargs":  # -I{} with no {} in the command: one run per line, no argument
            return ["xargs", f"-P{slots}"] + (["-n1"] if pass_line else ["-I{}"]) + cmd
        if self.tool == "shoal":
            flags = ["--discard-output", "--no-progress", "--no-summary"]
            return ["shoal", "run", "-", "-j", str(slots)] + flags
        return ["parallel", "--will-cite", f"-j{slots}"] + ([] if pass_line else ["-N0"]) + cmd

    def run(self, slots, cmd, lines, pass_line=True):
        if self.tool == "shoal":  # a task file: one whole command per line
            lines = [" ".join(cmd + [x] if pass_line else cmd) for x in lines]
        p = subprocess.run(
            self.argv(slots, cmd, pass_line),
            input="".join(x + "\n" for x in lines),
            text=True,
            stdout=subprocess.DEVNULL,
        )
        if p.returncode != 0:
            raise RuntimeError(f"{self.tool} exited {p.returncode}")
        return [0] * len(lines)

    def start(self, slots, kind):
        self.slots = slots
        self.t_launch = time.time()

    def first(self):
        self.run(2, ["/bin/true"], ["1"], pass_line=False)
        return 2

    def warmup(self, slots, dirpath):
        return None  # nothing to warm up: no runtime

    def w2(self, n):
        return self.run(self.slots, ["/bin/true"], [str(i) for i in range(n)], pass_line=False)

    def w3(self, ds):
        return self.run(self.slots, ["sleep"], ds)


if __name__ == "__main__":
    tool = parse_args().tool or "xargs"
    if tool not in ("xargs", "parallel", "shoal"):
        sys.exit("--tool must be xargs, parallel or shoal")
    os.environ.setdefault("PARALLEL_HOME", os.path.join(parse_args().workdir or ".", ".parallel"))
    drive(CmdLine(tool))
