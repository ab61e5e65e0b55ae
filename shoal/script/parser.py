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
    if not node.has_error:
        return None
    for child in node.children:
        found = _first_error(child)
        if found is not None:
            return found
    return node


@lru_cache(maxsize=1)
def _dollar_query() -> tree_sitter.QueryCursor:
    lang = tree_sitter.Language(tree_sitter_bash.language())
    return tree_sitter.QueryCursor(tree_sitter.Query(lang, '(concatenation "$" @d)'))


# tree-sitter-bash 0.25 splits `${f}_$n.nc` into `${f}_$` and a separate word `n.nc`.
# Where that happens its tree has a concatenation ending in a bare `$` right before a name;
# spelling that expansion `${n}` (same line, same meaning) makes it parse as bash does.
_SUSPECT = re.compile(rb"\}\w*\$[A-Za-z_]")


def _repair(source: bytes, root: Node) -> bytes | None:
    if not _SUSPECT.search(source):
        return None
    fixes: list[int] = []
    for node in _dollar_query().captures(root).get("d", []):
        parent = node.parent
        end = node.end_byte
        if parent is not None and parent.children[-1] == node and end < len(source) and (
                chr(source[end]).isalpha() or source[end:end + 1] == b"_"):
            fixes.append(node.start_byte)
    if not fixes:
        return None
    out = bytearray()
    pos = 0
    for start in sorted(set(fixes)):
        m = re.match(rb"\$([A-Za-z_]\w*)", source[start:])
        assert m is not None
        out += source[pos:start] + b"${" + m.group(1) + b"}"
        pos = start + m.end()
    out += source[pos:]
    return bytes(out)


def parse(source: bytes, script: str = "script") -> Node:
    """Parse ``source`` and return the root ``program`` node; raise ScriptError on a syntax error."""
    tree = _parser().parse(source)
    for _ in range(8):
        fixed = _repair(source, tree.root_node)
        if fixed is None:
            break
        source = fixed
        tree = _parser().parse(source)
    root = tree.root_node
    if root.has_error:
        bad = _first_error(root)
        assert bad is not None
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
