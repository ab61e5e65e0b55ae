"""The file system as the script sees it at each line, without running anything.

It starts as the real file system (read lazily, one directory listing at a time) and is then
changed by the script's own commands: files they create appear, files they remove disappear.
Globs and ``test -f`` are answered from this state, so they see exactly what bash would have
seen at that line.
"""

from __future__ import annotations

import fnmatch
import os
import re
from functools import lru_cache

FILE = "f"
DIR = "d"


@lru_cache(maxsize=4096)
def _compile_glob(pattern: str) -> re.Pattern[str]:
    return re.compile(fnmatch.translate(pattern), re.DOTALL)


def _normal(path: str) -> str:
    """``os.path.normpath`` of an absolute path, skipped when the path is already normal."""
    if "//" in path or "/." in path or path.endswith("/") or not path.startswith("/"):
        return os.path.normpath(path)
    return path


def _literal_prefix(pattern: str) -> str:
    """The text every match of the glob ``pattern`` starts with."""
    for i, c in enumerate(pattern):
        if c in "*?[\\":
            return pattern[:i]
    return pattern


def has_glob(text: str) -> bool:
    """True when ``text`` has an unescaped glob character (``*``, ``?`` or ``[``)."""
    return "*" in text or "?" in text or "[" in text


class SimFS:
    """Simulated file system state: real listing at start, plus the script's own changes."""

    def __init__(self) -> None:
        # absolute dir path -> {name: kind}; filled from the real disk on first use
        self._dirs: dict[str, dict[str, str]] = {}
        # paths whose content the script has written (so their content is unknown statically)
        self.written: dict[str, int] = {}

    def _listing(self, d: str) -> dict[str, str] | None:
        entries = self._dirs.get(d)
        if entries is not None:
            return entries
        parent, name = os.path.split(d)
        if d != parent:  # not the root
            up = self._listing(parent)
            if up is None or up.get(name) != DIR:
                return None
        elif not os.path.isdir(d):
            return None
        entries = {}
        try:
            with os.scandir(d) as it:
                for e in it:
                    try:
                        entries[e.name] = DIR if e.is_dir() else FILE
                    except OSError:
                        entries[e.name] = FILE
        except OSError:
            pass
        self._dirs[d] = entries
        return entries

    def kind(self, path: str) -> str | None:
        """``"f"``, ``"d"`` or None (absent) for an absolute path."""
        if "//" in path or "/." in path or path.endswith("/") or not path.startswith("/"):
            path = os.path.normpath(path)
        if path == "/":
            return DIR
        parent, _, name = path.rpartition("/")
        listing = self._dirs.get(parent or "/")
        if listing is None:
            listing = self._listing(parent or "/")
        return None if listing is None else listing.get(name)

    def exists(self, path: str) -> bool:
        return self.kind(path) is not None

    def isdir(self, path: str) -> bool:
        return self.kind(path) == DIR

    def isfile(self, path: str) -> bool:
        return self.kind(path) == FILE

    def listdir(self, d: str) -> list[str]:
        listing = self._listing(os.path.normpath(d))
        return [] if listing is None else list(listing)

    def _holder(self, path: str) -> tuple[str, str, dict[str, str] | None]:
        """``path`` normalised, its name, and the listing of its parent (None if absent)."""
        path = _normal(path)
        parent, _, name = path.rpartition("/")
        parent = parent or "/"
        listing = self._dirs.get(parent)
        if listing is None:
            listing = self._listing(parent)
        return path, name, listing

    def add_file(self, path: str, line: int = 0) -> None:
        """Record that the script creates or rewrites the file ``path`` (at script line ``line``)."""
        path, name, listing = self._holder(path)
        if listing is None:
            parent = path.rpartition("/")[0] or "/"
            self.mkdir(parent)
            listing = self._listing(parent)
            assert listing is not None
        listing[name] = FILE
        self.written[path] = line

    def mkdir(self, path: str) -> None:
        """Create ``path`` and its parents (``mkdir -p``)."""
        path = os.path.normpath(path)
        parent, name = os.path.split(path)
        if path == parent:
            return
        if self._listing(parent) is None:
            self.mkdir(parent)
        listing = self._listing(parent)
        assert listing is not None
        if listing.get(name) != DIR:
            listing[name] = DIR
            self._dirs[path] = {}

    def remove(self, path: str) -> list[str]:
        """Remove ``path`` (recursively for a directory); return the files removed."""
        path, name, listing = self._holder(path)
        if listing is None or name not in listing:
            return []
        removed: list[str] = []
        if listing[name] == DIR:
            for child in self.listdir(path):
                removed.extend(self.remove(os.path.join(path, child)))
            self._dirs.pop(path, None)
        else:
            removed.append(path)
        del listing[name]
        self.written.pop(path, None)
        return removed

    def glob(self, pattern: str, cwd: str) -> list[str]:
        """Expand a glob pattern (relative to ``cwd`` unless absolute) like bash does.

        Returns the matches spelled as the pattern spells them (relative stays relative),
        sorted; an empty list when nothing matches. ``*`` does not match a leading dot.
        """
        absolute = pattern.startswith("/")
        parts = [p for p in pattern.split("/") if p != ""]
        starts = [("/" if absolute else cwd, "/" if absolute else "")]
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            nxt: list[tuple[str, str]] = []
            for real, shown in starts:
                if not has_glob(part):
                    cand = os.path.join(real, part)
                    if (self.exists(cand) if last else self.isdir(cand)) or part in (".", ".."):
                        nxt.append((cand, shown + part + ("" if last else "/")))
                    continue
                match = _compile_glob(part).match
                hidden = part.startswith(".")
                listing = self._listing(os.path.normpath(real)) or {}
                if last:
                    lit = _literal_prefix(part)  # cheap test first: big directories
                    nxt.extend(("", shown + name) for name in listing
                               if name.startswith(lit) and (hidden or name[:1] != ".")
                               and match(name))
                    continue
                for name, kind in list(listing.items()):
                    if (hidden or name[:1] != ".") and match(name) and kind == DIR:
                        nxt.append((os.path.join(real, name), shown + name + "/"))
            starts = nxt
            if not starts:
                return []
        return sorted(shown for _, shown in starts)
