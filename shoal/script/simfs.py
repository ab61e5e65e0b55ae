"""The file system as the script sees it at each line, without running anything.

It starts as the real file system (read lazily, one directory listing at a time) and is then
changed by the script's own commands: files they create appear, files they remove disappear.
Globs and ``test -f`` are answered from this state, so they see exactly what bash would have
seen at that line. Symbolic links (found at start or made by ``ln``) are entries of their own
that name their target; lookups follow them as the kernel would, and a directory reached through
a link shares the listing of its target, so a file made through one name is seen through both.
"""

from __future__ import annotations

import fnmatch
import os
import re
from functools import lru_cache

FILE = "f"
DIR = "d"
LINK = "@"  # a listing entry "@TARGET" is a symbolic link (TARGET as ``readlink`` gives it)
_MAX_LINKS = 40  # symlinks followed in one lookup (Linux: ELOOP after 40)

# File-use roles beyond model.py's IN/OUT/INOUT/DEL, made by semantics.py and emit.py:
TREE = "tree"            # makes, copies or reads the whole tree at this path (mkdir, cp -r, mv):
#                          ordered with every command that touches the path or anything below it
RMTREE = "rmtree"        # removes the path and everything below it (rm -r, mv source); a TREE op
SYMLINK = "symlink"      # makes a symbolic link at path to ``FileUse.prefix``; a TREE op
VIA = "via"              # a name the command reaches a file through (a link): ordering only
PRESENT = "present"      # the file exists, unwritten by the script, before this command writes it
NOCLOBBER = "noclobber"  # output the program refuses to overwrite (NCO without -O/-A); emit
#                          makes it OUT when the file is absent, else an in-place use of the file
TREE_OPS = frozenset({TREE, RMTREE, SYMLINK})


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
        # directory paths that go through a link -> the path they resolve to (their listing is
        # the target's own dict); dropped whenever a link or a directory goes away
        self._alias: dict[str, str] = {}
        self.has_links = False

    def _listing(self, d: str, depth: int = 0) -> dict[str, str] | None:
        entries = self._dirs.get(d)
        if entries is not None:
            return entries
        parent, name = os.path.split(d)
        if d != parent:  # not the root
            up = self._listing(parent, depth)
            if up is None:
                return None
            k = up.get(name)
            if k != DIR and (k is None or k[0] != LINK):
                return None
            if k != DIR or parent in self._alias:  # reached through a link: share the target's
                if depth > _MAX_LINKS:
                    return None
                real = self.resolve(d)
                if real != d:
                    entries = self._listing(real, depth + 1)
                    if entries is not None:
                        self._dirs[d] = entries
                        self._alias[d] = real
                    return entries
        elif not os.path.isdir(d):
            return None
        entries = {}
        try:
            with os.scandir(d) as it:
                for e in it:
                    try:
                        if e.is_symlink():
                            entries[e.name] = LINK + os.readlink(e.path)
                            self.has_links = True
                        else:
                            entries[e.name] = DIR if e.is_dir() else FILE
                    except OSError:
                        entries[e.name] = FILE
        except OSError:
            pass
        self._dirs[d] = entries
        return entries

    def resolve(self, path: str, follow: bool = True, depth: int = 0) -> str:
        """``path`` with every symbolic link in it replaced by its target, as far as the state
        knows (the last component too unless ``follow`` is false): the file really used."""
        path = _normal(path)
        if path == "/":
            return path
        parent, _, name = path.rpartition("/")
        parent = parent or "/"
        listing = self._dirs.get(parent)
        if listing is None:
            listing = self._listing(parent)  # may find the first link
        if not self.has_links:
            return path
        real_parent = self._alias.get(parent)
        k = listing.get(name) if follow and listing is not None else None
        if k is None or k[0] != LINK or depth > _MAX_LINKS:
            if real_parent is None:  # the common case: nothing to replace
                return path
            return real_parent + "/" + name if real_parent != "/" else "/" + name
        return self.resolve(os.path.join(real_parent or parent, k[1:]), True, depth + 1)

    def lookup(self, path: str, follow: bool = True) -> tuple[str, str | None, bool]:
        """``(resolve(path, follow), kind, its directory exists)`` in one step (the compiler asks
        them per file use); ``kind`` follows a last link only when ``follow`` is true."""
        if "//" in path or "/." in path or path.endswith("/") or not path.startswith("/"):
            path = os.path.normpath(path)
        parent, _, name = path.rpartition("/")
        parent = parent or "/"
        listing = self._dirs.get(parent)
        if listing is None:
            listing = self._listing(parent)
            if listing is None:
                return path, None, False
        k = listing.get(name)
        if k is not None and len(k) > 1 and follow:  # a link: the file is its target
            real = self.resolve(path)
            k = self.kind(real, False)
            there = self.isdir(real.rpartition("/")[0] or "/")
            return real, None if k is not None and k[0] == LINK else k, there
        real_parent = self._alias.get(parent)
        if real_parent is not None:
            path = real_parent + "/" + name if real_parent != "/" else "/" + name
        return path, k, True

    def _forget_aliases(self) -> None:
        for a in self._alias:
            self._dirs.pop(a, None)
        self._alias.clear()

    def kind(self, path: str, follow: bool = True) -> str | None:
        """``"f"``, ``"d"`` or None (absent) for an absolute path; a link is followed (a dangling
        one is absent) unless ``follow`` is false, then its entry ``"@TARGET"`` is returned."""
        if "//" in path or "/." in path or path.endswith("/") or not path.startswith("/"):
            path = os.path.normpath(path)
        if path == "/":
            return DIR
        parent, _, name = path.rpartition("/")
        listing = self._dirs.get(parent or "/")
        if listing is None:
            listing = self._listing(parent or "/")
        if listing is None:
            return None
        k = listing.get(name)
        if k is None or len(k) == 1 or not follow:
            return k
        real = self.resolve(path)
        k = self.kind(real, False)
        return None if k is not None and k[0] == LINK else k  # a loop

    def exists(self, path: str) -> bool:
        return self.kind(path) is not None

    def isdir(self, path: str) -> bool:
        return self.kind(path) == DIR

    def isfile(self, path: str) -> bool:
        return self.kind(path) == FILE

    def listdir(self, d: str) -> list[str]:
        listing = self._listing(os.path.normpath(d))
        return [] if listing is None else list(listing)

    def entries(self, d: str) -> list[tuple[str, str]]:
        """(name, kind) of the entries of directory ``d``; links as ``"@TARGET"``."""
        listing = self._listing(os.path.normpath(d))
        return [] if listing is None else list(listing.items())

    def _holder(self, path: str) -> tuple[str, str, dict[str, str] | None]:
        """``path`` normalised, its name, and the listing of its parent (None if absent)."""
        path = _normal(path)
        parent, _, name = path.rpartition("/")
        parent = parent or "/"
        listing = self._dirs.get(parent)
        if listing is None:
            listing = self._listing(parent)
        return path, name, listing

    def _made_holder(self, path: str) -> tuple[str, str, dict[str, str]]:
        """:meth:`_holder`, making the parent directory when it is not there."""
        path, name, listing = self._holder(path)
        if listing is None:
            parent = path.rpartition("/")[0] or "/"
            self.mkdir(parent)
            listing = self._listing(parent)
            assert listing is not None
        return path, name, listing

    def add_file(self, path: str, line: int = 0) -> None:
        """Record that the script creates or rewrites the file ``path`` (at script line ``line``)."""
        path, name, listing = self._made_holder(path)
        k = listing.get(name)
        if k is not None and k[0] == LINK:  # written through the link: the target changes
            real = self.resolve(path)
            if real != path and self.kind(real, False) in (None, FILE):
                self.add_file(real, line)
                return
        listing[name] = FILE
        self.written[path] = line

    def add_link(self, path: str, target: str) -> None:
        """Record a symbolic link ``path`` -> ``target`` (the text ``ln -s`` was given)."""
        path, name, listing = self._made_holder(path)
        if name in listing:
            self._forget_aliases()
        listing[name] = LINK + target
        self.has_links = True
        self.written.pop(path, None)

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
        path = self.resolve(path, follow=False)  # its listing is keyed by the real path
        if listing.get(name) != DIR and self.kind(path) != DIR:
            listing[name] = DIR
            self._dirs[path] = {}

    def remove(self, path: str) -> list[str]:
        """Remove ``path`` (recursively for a directory; a link itself, not its target); return
        the files removed."""
        path, name, listing = self._holder(path)
        if listing is None or name not in listing:
            return []
        removed: list[str] = []
        k = listing[name]
        if k == DIR:
            real = self._alias.get(path, path)
            for child in self.listdir(path):
                removed.extend(self.remove(os.path.join(real, child)))
            self._dirs.pop(real, None)
            if self._alias:
                self._forget_aliases()
        else:
            removed.append(path)
            if k[0] == LINK and self._alias:
                self._forget_aliases()
        del listing[name]
        self.written.pop(path, None)
        return removed

    def glob(self, pattern: str, cwd: str, dotglob: bool = False) -> list[str]:
        """Expand a glob pattern (relative to ``cwd`` unless absolute) like bash does.

        Returns the matches spelled as the pattern spells them (relative stays relative),
        sorted; an empty list when nothing matches. ``*`` does not match a leading dot
        unless ``dotglob`` (``shopt -s dotglob``; ``.`` and ``..`` are never listed).
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
                hidden = dotglob or part.startswith(".")
                listing = self._listing(os.path.normpath(real)) or {}
                if last:
                    lit = _literal_prefix(part)  # cheap test first: big directories
                    nxt.extend(("", shown + name) for name in listing
                               if name.startswith(lit) and (hidden or name[:1] != ".")
                               and match(name))
                    continue
                for name, kind in list(listing.items()):
                    if (hidden or name[:1] != ".") and match(name) and (kind == DIR or (
                            kind[0] == LINK and self.isdir(os.path.join(real, name)))):
                        nxt.append((os.path.join(real, name), shown + name + "/"))
            starts = nxt
            if not starts:
                return []
        return sorted(shown for _, shown in starts)
