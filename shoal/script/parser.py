"""Front end: parse shell source with tree-sitter-bash and reject what it could not parse.

tree-sitter is an error-recovering parser: it always returns a tree, marking the parts it could
not parse with ``ERROR`` or ``MISSING`` nodes. We turn the first of those into a ScriptError
naming its line, so a syntax error never reaches the interpreter.
"""

from __future__ import annotations

import re
from functools import lru_cache

import tree_sitter
import tree_sitter_bash

from .errors import ScriptError

Node = tree_sitter.Node


@lru_cache(maxsize=1)
def _parser() -> tree_sitter.Parser:
    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))


def _first_error(node: Node) -> Node | None:
    # descend only into subtrees that contain an error: cheap on large, valid scripts
    if node.type == "ERROR" or node.is_missing:
        return node
    if not node.has_error or node.type == "heredoc_body":
        # a here-document's text is expanded from its source (words.py), not from the tree,
        # where tree-sitter misreads `$(( a * (b - 1) ))` as a subshell
        return None
    in_child = False  # an error inside a child that holds only here-document errors
    for child in node.children:
        found = _first_error(child)
        if found is not None:
            return found
        in_child = in_child or child.has_error
    return None if in_child else node


# tree-sitter-bash 0.25 reads `BASE#$var` in arithmetic (`$((10#$y))`) as a comment, but
# parses `10#${y}`: spelling the expansion with braces (same meaning) makes it parse as bash does.
_BASE_VAR = re.compile(rb"\d+#\$([A-Za-z_]\w*|\d)")
_ARITH_TYPES = ("arithmetic_expansion", "c_style_for_statement", "compound_statement")


def _repair_base(source: bytes, root: Node) -> list[tuple[int, bytes]]:
    fixes: list[re.Match[bytes]] = []
    stack = [root]
    while stack:
        node = stack.pop()
        if not node.has_error and node.type != "ERROR":
            continue
        if node.type == "ERROR" and _in_arithmetic(node):
            m = _BASE_VAR.match(source, node.start_byte)
            if m:
                fixes.append(m)
        stack.extend(node.children)
    inserts: list[tuple[int, bytes]] = []
    for m in fixes:
        inserts += [(m.start(1), b"{"), (m.end(1), b"}")]
    return inserts


def _insert(source: bytes, inserts: list[tuple[int, bytes]],
            masks: list[tuple[int, bytes]] | None = None) -> bytes:
    """``source`` with ``(position, text)`` inserted; the starts of ``masks`` after an
    insertion move with it."""
    out = bytearray()
    pos = 0
    for at, text in sorted(set(inserts)):
        out += source[pos:at] + text
        pos = at
        if masks:
            masks[:] = [(m + len(text) if m >= at else m, t) for m, t in masks]
    out += source[pos:]
    return bytes(out)


def _glued_lines(source: bytes, root: Node) -> list[tuple[int, bytes]]:
    """Where tree-sitter continued a simple command over a newline (it does, rarely, after a
    pipeline: `a | b | true` NEWLINE `echo x >> f` became one command). In bash a newline
    ends a command: a `;` before it makes tree-sitter see that too (same lines)."""
    out: list[tuple[int, bytes]] = []
    stack = [root]
    while stack:
        node = stack.pop()
        if node.start_point[0] == node.end_point[0]:
            continue  # on one line: nothing glued below
        if node.type == "command":
            kids = node.children
            for a, b in zip(kids, kids[1:], strict=False):
                gap = source[a.end_byte:b.start_byte]
                if b"\n" in gap.replace(b"\\\n", b""):
                    out.append((a.end_byte, b";"))
        stack.extend(node.children)
    return out


def _in_arithmetic(node: Node) -> bool:
    while node.parent is not None:
        node = node.parent
        if node.type in _ARITH_TYPES:
            return True
    return False


# `<<WORD`, `<<-WORD`, `<<'WORD'`, `<<"WORD"` (not `<<<`)
_HEREDOC_OP = re.compile(rb"(?<!<)<<(-?)[ \t]*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\2")


def _heredoc_bodies(source: bytes) -> list[tuple[int, int, bool]]:
    """(start, end, quoted) of each here-document body, found line by line as bash reads
    them: bodies start on the line after their operator and end at the delimiter line."""
    out: list[tuple[int, int, bool]] = []
    pending: list[tuple[bool, bytes, bool]] = []  # (strip tabs, delimiter, quoted)
    body_start = 0
    pos = 0
    for line in source.split(b"\n"):
        nxt = pos + len(line) + 1
        if pending:
            strip, delim, quoted = pending[0]
            if (line.lstrip(b"\t") if strip else line) == delim:
                out.append((body_start, pos, quoted))
                pending.pop(0)
                body_start = nxt
        else:
            for m in _HEREDOC_OP.finditer(_code_part(line)):
                pending.append((m.group(1) == b"-", m.group(3), m.group(2) != b""))
            body_start = nxt
        pos = nxt
    return out


def _code_part(line: bytes) -> bytes:
    """The line with quoted text blanked and its comment cut (where a heredoc operator can
    be)."""
    out = bytearray(line)
    quote = 0
    i = 0
    while i < len(line):
        c = line[i]
        if quote:
            if c == quote:
                quote = 0
            elif c == 0x5C and quote == 0x22:  # backslash in "..."
                out[i] = 0x20
                i += 1
                if i < len(line):
                    out[i] = 0x20
            else:
                out[i] = 0x20
        elif c == 0x5C:  # backslash
            i += 1
        elif c in (0x22, 0x27):  # " '
            quote = c
        elif c == 0x23 and (i == 0 or line[i - 1] in b" \t;&|("):  # a comment
            return bytes(out[:i])
        i += 1
    return bytes(out)


def _mask_heredocs(source: bytes, masks: list[tuple[int, bytes]]) -> bytes:
    """Blank the unquoted here-document bodies that hold ``$((``: tree-sitter misreads
    ``$(( a * (b - 1) ))`` there as a subshell and gives up on the rest of the script. Their
    text is expanded from the original source anyway (``masks``: start, original bytes)."""
    if b"<<" not in source or b"$((" not in source:
        return source
    out = bytearray(source)
    for start, end, quoted in _heredoc_bodies(source):
        body = source[start:end]
        if not quoted and b"$((" in body:
            masks.append((start, body))
            out[start:end] = re.sub(rb"[^\n]", b" ", body)
    return bytes(out)


def parse(source: bytes, script: str = "script",
          masks: list[tuple[int, bytes]] | None = None) -> Node:
    """Parse ``source`` and return the root ``program`` node; raise ScriptError on a syntax error.

    tree-sitter-bash's word boundaries are not bash's (``$a/$b.nc`` may come out as two
    nodes): the interpreter joins adjacent nodes and reads words from their source text.
    With ``masks``, here-document bodies tree-sitter cannot read are blanked in the tree and
    listed there, (start byte, original text), for the caller to expand.
    """
    if masks is not None:
        source = _mask_heredocs(source, masks)
    root = _parser().parse(source).root_node
    if root.has_error and b"#$" in source:
        fixes = _repair_base(source, root)
        if fixes:
            source = _insert(source, fixes, masks)
            root = _parser().parse(source).root_node
    for _ in range(8):
        fixes = _glued_lines(source, root)
        if not fixes:
            break
        source = _insert(source, fixes, masks)
        root = _parser().parse(source).root_node
    bad = _first_error(root) if root.has_error else None
    if bad is not None:
        line = bad.start_point[0] + 1
        if bad.is_missing:
            # name the construct left open, on the line where it starts
            opener = bad.parent if bad.parent is not None else bad
            while opener.parent is not None and opener.type in ("do_group", "compound_statement"):
                opener = opener.parent
            line = opener.start_point[0] + 1
            msg = (f"syntax error: '{opener.type.replace('_statement', '')}' is not closed "
                   f"(missing '{bad.type}')")
        else:
            # skip the complete statements the error node swallowed before the bad part
            for child in bad.children:
                if not child.is_named or child.has_error or child.type == "ERROR":
                    line = child.start_point[0] + 1
                    bad = child
                    break
            text = bad.text.decode(errors="replace").strip().splitlines()
            near = text[0][:40] if text else ""
            msg = f"syntax error near '{near}'" if near else "syntax error"
        raise ScriptError(msg, line, script)
    return root


def parse_fragment(text: str) -> Node:
    """Parse a fragment (e.g. an arithmetic expression given as text to ``let``); no error check."""
    return _parser().parse(text.encode()).root_node
