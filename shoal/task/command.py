"""Command tasks: a program or shell line run by an agent, not a Python call."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

# Where a command's stdout/stderr goes:
#   CAPTURE  (default) captured and returned in CommandResult
#   DEVNULL  discarded
#   INHERIT  the agent's own stream (the terminal when run locally)
#   a path   written to that file on the node that runs it (str; "{id}" is replaced by the task id)
CAPTURE = "capture"
DEVNULL = "devnull"
INHERIT = "inherit"


@dataclass(frozen=True)
class Command:
    """A command task.

    ``args`` is an argv list (run directly, no shell) or a string (run with ``/bin/sh -c``,
    as GNU parallel and HyperQueue do; a string of plain words naming one program runs
    that program directly, as GNU make does, and goes to the shell if that fails, so
    messages and exit statuses stay the shell's: see shoal.agent.spawnline). ``env`` entries are added to the agent's
    environment (``None`` values remove a variable). ``check=True`` makes the future raise
    :class:`CommandError` on a non-zero exit status; otherwise it resolves to a
    :class:`CommandResult` whatever the status. ``cores`` is how many cores the command
    occupies on its node.
    """

    args: str | Sequence[str]
    cwd: str | None = None
    env: Mapping[str, str | None] | None = None
    stdout: str = CAPTURE
    stderr: str = CAPTURE
    check: bool = False
    cores: int = 1
    stdin: str | None = None  # a path to read stdin from; default /dev/null

    def argv(self) -> list[str]:
        if isinstance(self.args, str):
            return ["/bin/sh", "-c", self.args]
        return [str(a) for a in self.args]

    def describe(self) -> str:
        return self.args if isinstance(self.args, str) else " ".join(map(str, self.args))


@dataclass(frozen=True)
class CommandResult:
    """What a finished command task resolves to."""

    returncode: int
    stdout: bytes | None = None
    stderr: bytes | None = None
    args: str | Sequence[str] = field(default="")
    duration: float = 0.0

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def check_returncode(self) -> None:
        if self.returncode != 0:
            raise CommandError(self.returncode, self.args, self.stdout, self.stderr)


class CommandError(subprocess.CalledProcessError):
    """A command task exited with a non-zero status and ``check=True`` was asked."""

    def __str__(self) -> str:
        text = super().__str__()
        if self.stderr:
            tail = self.stderr[-400:].decode(errors="replace").strip()
            if tail:
                text += f"\nstderr: {tail}"
        return text
