"""Word expansion: parameters, command substitution, arithmetic, splitting, globbing, braces."""

from __future__ import annotations

import fnmatch
import os
import re
from functools import lru_cache

from .errors import Unsupported
from .nodes import _BRACE, _SLOW, _SPECIAL_WORD, _lead, _text
from .parser import Node, parse_fragment
from .simfs import has_glob


def _escape_glob(text: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", text)


def _unescape_word(text: str) -> list[tuple[str, bool]]:
    """Split an unquoted word into (text, quoted) pieces; a backslash quotes the next char."""
    if "\\" not in text:
        return [(text, False)]
    out: list[tuple[str, bool]] = []
    i = 0
    buf = ""
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            if text[i + 1] == "\n":  # line continuation
                i += 2
                continue
            if buf:
                out.append((buf, False))
                buf = ""
            out.append((text[i + 1], True))
            i += 2
            continue
        buf += c
        i += 1
    if buf:
        out.append((buf, False))
    return out


def _dq_unescape(text: str) -> str:
    # inside double quotes a backslash only escapes $ ` " \ and newline
    return re.sub(r'\\([$`"\\\n])', lambda m: "" if m.group(1) == "\n" else m.group(1), text)


def _ansi_c(text: str) -> str:
    try:
        return text.encode("latin-1", "backslashreplace").decode("unicode_escape")
    except UnicodeDecodeError:
        return text


def brace_expand(text: str) -> list[str]:
    """Bash brace expansion of one raw word (``a{b,c}d``, ``x{1..3}``); quotes are respected."""
    depth_q = None
    i = 0
    while i < len(text):
        c = text[i]
        if depth_q:
            if c == depth_q:
                depth_q = None
            elif c == "\\" and depth_q == '"':
                i += 1
        elif c in "'\"":
            depth_q = c
        elif c == "\\":
            i += 1
        elif c == "{" and (i == 0 or text[i - 1] != "$"):
            depth = 0
            j = i
            parts: list[str] = []
            start = i + 1
            while j < len(text):
                if text[j] == "{":
                    depth += 1
                elif text[j] == "}":
                    depth -= 1
                    if depth == 0:
                        break
                elif text[j] == "," and depth == 1:
                    parts.append(text[start:j])
                    start = j + 1
                j += 1
            if j >= len(text):
                return [text]
            pre, body, post = text[:i], text[i + 1:j], text[j + 1:]
            if parts:
                parts.append(text[start:j])
                alts = parts
            else:
                m = re.fullmatch(r"(-?\d+|[A-Za-z])\.\.(-?\d+|[A-Za-z])(?:\.\.(-?\d+))?", body)
                if not m:
                    return [pre + "{" + body + "}" + s for s in brace_expand(post)]
                a, b, step = m.group(1), m.group(2), abs(int(m.group(3) or 1)) or 1
                if a.lstrip("-").isdigit() and b.lstrip("-").isdigit():
                    lo, hi = int(a), int(b)
                    rng = range(lo, hi + 1, step) if lo <= hi else range(lo, hi - 1, -step)
                    width = max(len(a), len(b)) if (a.startswith("0") or b.startswith("0")) else 0
                    alts = [str(v).zfill(width) for v in rng]
                else:
                    lo, hi = ord(a), ord(b)
                    rng = range(lo, hi + 1, step) if lo <= hi else range(lo, hi - 1, -step)
                    alts = [chr(v) for v in rng]
            out: list[str] = []
            for alt in alts:
                for tail in brace_expand(post):
                    out.extend(brace_expand(pre + alt + tail))
            return out
        i += 1
    return [text]


_DEFAULT_IFS = " \t\n"


@lru_cache(maxsize=16)
def _ifs_splitter(ifs: str) -> re.Pattern[str]:
    # IFS white space separates runs; other IFS characters separate single fields
    ws = "".join(c for c in ifs if c in " \t\n")
    other = "".join(c for c in ifs if c not in " \t\n")
    parts = []
    if ws:
        parts.append("[" + re.escape(ws) + "]+")
    if other:
        w = "[" + re.escape(ws) + "]*" if ws else ""
        parts.append(w + "[" + re.escape(other) + "]" + w)
    return re.compile("|".join(reversed(parts)))


class _Fields:
    """Builds the fields of one word during expansion (word splitting happens here)."""

    def __init__(self) -> None:
        self.fields: list[list[tuple[str, bool]]] = []
        self.cur: list[tuple[str, bool]] | None = None

    def lit(self, text: str, quoted: bool) -> None:
        if self.cur is None:
            self.cur = []
            self.fields.append(self.cur)
        self.cur.append((text, quoted))

    def split(self, text: str, ifs: str) -> None:
        if ifs == _DEFAULT_IFS and " " not in text and "\t" not in text and "\n" not in text:
            if text:  # nothing to split (the usual case)
                self.lit(text, False)
            return
        if ifs == "":
            if text:
                self.lit(text, False)
            return
        hard = any(c not in " \t\n" for c in ifs)  # a:b::c has an empty field
        pieces = _ifs_splitter(ifs).split(text.strip(" \t\n") if hard else text)
        if hard and pieces and pieces[-1] == "":
            pieces.pop()
        for k, piece in enumerate(pieces):
            if k:
                self.cur = None
            if piece or hard:
                self.lit(piece, False)

    def brk(self) -> None:
        self.cur = None




class ExpandMixin:
    """Expansion of words, as the interpreter's mixin."""

    # ------------------------------------------------------------------ expansion
    def expand_words(self, nodes: list[Node]) -> list[str]:
        """Expand argument nodes into words: parameters, splitting, globbing, braces."""
        return self._expand_progs([self._word_prog(n, True) for n in nodes])

    def _word_prog(self, n: Node, cache: bool) -> str | tuple | Node:  # type: ignore[type-arg]
        """How to expand the word ``n``: a str (a plain word: itself), a plan (a tuple, see
        :meth:`_plan`), or the node itself (the general expander)."""
        t = n.type
        if t == "command_name":
            kids = n.children
            if len(kids) == 1 and kids[0].is_named:
                n = kids[0]  # expands as its only child
                t = n.type
        if t == "word" or t == "number":
            raw = n.text or b""
            if not _SPECIAL_WORD.search(raw):  # plain word: itself (hot path)
                return raw.decode(errors="surrogateescape")
        if t in ("word", "concatenation", "brace_expression") and b"{" in (
                n.text or b"") and _BRACE.search(_text(n)):
            return n
        plan = self._plan(n) if cache else self._make_plan(n)
        return plan if plan else n

    def _expand_progs(self, progs: list) -> list[str]:  # type: ignore[type-arg]
        out: list[str] = []
        for p in progs:
            tp = type(p)
            if tp is str:
                out.append(p)
                continue
            if tp is tuple:
                w = self._plan_word(p)
                if w is not _SLOW:
                    if w is not None:
                        out.append(w)  # type: ignore[arg-type]
                    continue
                f = _Fields()
                self._run_plan(p, f, False)
            else:
                n = p
                t = n.type
                if t in ("word", "concatenation", "brace_expression") and b"{" in (
                        n.text or b"") and _BRACE.search(_text(n)):
                    alts = brace_expand(_text(n))
                    if len(alts) > 1 or alts[0] != _text(n):
                        for alt in alts:
                            sub = parse_fragment(": " + alt).children[0]
                            args = [c for i, c in enumerate(sub.children)
                                    if sub.field_name_for_child(i) == "argument"]
                            out.extend(self.expand_words(args))
                        continue
                f = _Fields()
                self._expand_into(n, f, quoted=False)
            for fl in f.fields:
                out.extend(self._glob_field(fl))
        return out

    def _plan(self, node: Node) -> tuple[tuple[str, str, bool], ...] | None:
        """The word as simple steps (literal text, plain variable), cached per node; None when
        it needs the general expander. Loops expand the same words thousands of times."""
        hit = self._plan_cache.get(node.id)
        if hit is not None and hit[0] == node:
            return hit[1]
        plan = self._make_plan(node)
        self._plan_cache[node.id] = (node, plan)
        return plan

    def _make_plan(self, node: Node) -> tuple[tuple[str, str, bool], ...] | None:
        ops: list[tuple[str, str, bool]] = []
        return tuple(ops) if self._plan_into(node, ops, False) else None

    def _plan_into(self, node: Node, ops: list[tuple[str, str, bool]], quoted: bool) -> bool:
        # ops: ("lit", text, quoted), ("v", name, quoted) for a variable, ("var", name, quoted)
        # for a positional parameter
        t = node.type
        if t in ("word", "number"):
            raw = node.text or b""
            if _SPECIAL_WORD.search(raw) or (quoted and t == "word"):
                return False
            ops.append(("lit", raw.decode(errors="surrogateescape"), quoted))
            return True
        if t == "raw_string":
            ops.append(("lit", _text(node)[1:-1], True))
            return True
        if t in ("simple_expansion", "expansion"):
            kids = node.children
            inner = kids[1:] if t == "simple_expansion" else kids[1:-1]
            if len(inner) != 1 or inner[0].type != "variable_name" or (
                    t == "expansion" and kids[-1].type != "}") or _lead(node):
                return False
            name = _text(inner[0])
            ops.append(("v" if name.isidentifier() else "var", name, quoted))
            return True
        if t == "concatenation":
            return all(c.is_named and self._plan_into(c, ops, quoted) for c in node.children)
        if t == "string" and not quoted:
            kids = node.children
            if len(kids) < 2 or _text(kids[-1]) != '"' or _text(kids[0]) != '"':
                return False
            ops.append(("lit", "", True))
            pos = kids[0].end_byte
            for c in kids[1:-1]:
                if c.start_byte != pos:
                    return False
                if c.type == "string_content":
                    ops.append(("lit", _dq_unescape(_text(c)), True))
                elif not (c.is_named and self._plan_into(c, ops, True)):
                    return False
                pos = c.end_byte
            return kids[-1].start_byte == pos
        return False

    def _plan_word(self, plan: tuple[tuple[str, str, bool], ...]) -> str | None | object:
        """Expand a planned word in argument position when that needs neither word splitting
        nor globbing (the usual case): the word, or None (no field). ``_SLOW`` otherwise."""
        vars_ = self.vars
        ifs = vars_.get("IFS")
        if ifs is not None and ifs != _DEFAULT_IFS and ifs != "":
            return _SLOW
        splits = ifs != ""  # IFS unset or the default: white space splits
        parts: list[str] = []
        field = False
        for op, text, quoted in plan:
            if op == "lit":
                parts.append(text)
                field = True
                continue
            v = vars_.get(text) if op == "v" else self._get(text)
            if quoted:
                field = True
                if v:
                    parts.append(v)
                continue
            if not v:
                continue
            if splits and (" " in v or "\t" in v or "\n" in v):
                return _SLOW  # word splitting
            if "*" in v or "?" in v or "[" in v:
                return _SLOW  # globbing
            parts.append(v)
            field = True
        return "".join(parts) if field else None

    def _run_plan(self, plan: tuple[tuple[str, str, bool], ...], f: _Fields, _q: bool) -> None:
        for op, text, quoted in plan:
            if op == "lit":
                f.lit(text, quoted)
            else:
                value = self.vars.get(text) if op == "v" else self._get(text)
                self._value_into(value or "", f, quoted)

    def _glob_field(self, fl: list[tuple[str, bool]]) -> list[str]:
        if len(fl) == 1:
            t, q = fl[0]
            if q or not has_glob(t):
                return [t]
        if any(not q and has_glob(t) for t, q in fl):
            pattern = "".join(_escape_glob(t) if q else t for t, q in fl)
            matches = self.fs.glob(pattern, self.cwd)
            if matches:
                return matches
        return ["".join(t for t, _ in fl)]

    def expand_str(self, node: Node) -> str:
        """Expand a node to one string (no splitting or globbing: assignments, case, targets)."""
        t = node.type
        if t == "command_substitution":
            return self.command_substitution(node)
        if t == "arithmetic_expansion":
            value = 0
            for e in self._arith_exprs(node):
                value = self.arith(e)
            return str(value)
        plan = self._plan(node)
        if plan:
            vars_ = self.vars
            parts = []
            for op, text, _quoted in plan:
                if op == "lit":
                    parts.append(text)
                else:
                    v = vars_.get(text) if op == "v" else self._get(text)
                    if v:
                        parts.append(v)
            return "".join(parts)
        return self._expand_str_slow(node)

    def _expand_str_slow(self, node: Node) -> str:
        f = _Fields()
        self._expand_into(node, f, quoted=True)
        return " ".join("".join(t for t, _ in fl) for fl in f.fields)

    def _expand_into(self, node: Node, f: _Fields, quoted: bool) -> None:
        t = node.type
        if t in ("word", "number", "extglob_pattern", "regex", "test_operator",
                 "variable_name", "heredoc_content", "file_descriptor", "special_variable_name"):
            text = _text(node)
            if quoted:
                f.lit(text, True if t != "word" else False)
                return
            if t == "word" and text.startswith("~"):
                head, sep, rest = text.partition("/")
                home = self.vars.get("HOME", "~") if head == "~" else None
                if home is not None:
                    f.lit(home, True)
                    text = sep + rest
            for piece, q in _unescape_word(text):
                f.lit(piece, q)
        elif t == "raw_string":
            f.lit(_text(node)[1:-1], True)
        elif t == "ansi_c_string":
            f.lit(_ansi_c(_text(node)[2:-1]), True)
        elif t in ("string", "translated_string"):
            f.lit("", True)  # "" is an (empty) field
            # tree-sitter leaves some text (white space) out of string_content nodes: take
            # the gaps between children from the source
            raw = node.text or b""
            base = node.start_byte
            kids = self._kids(node)
            pos = kids[0].end_byte if kids else base
            for c in kids[1:]:
                if c.start_byte > pos:
                    f.lit(_dq_unescape(raw[pos - base:c.start_byte - base].decode(
                        errors="surrogateescape")), True)
                if c is kids[-1] and not c.is_named:
                    # the closing quote token may carry white space before it: ' "'
                    closing = _text(c)
                    if len(closing) > 1 and closing.endswith('"'):
                        f.lit(_dq_unescape(closing[:-1]), True)
                    break
                if c.type == "string_content":
                    f.lit(_dq_unescape(_text(c)), True)
                elif c.is_named:
                    lead = _lead(c)
                    if lead:
                        f.lit(lead, True)
                    self._expand_into(c, f, quoted=True)
                else:
                    f.lit(_text(c), True)
                pos = c.end_byte
        elif t in ("simple_expansion", "expansion"):
            self._parameter(node, f, quoted)
        elif t == "command_substitution":
            self._value_into(self.command_substitution(node), f, quoted)
        elif t == "arithmetic_expansion":
            exprs = self._arith_exprs(node)
            value = 0
            for e in exprs:
                value = self.arith(e)
            self._value_into(str(value), f, quoted)
        elif t in ("concatenation", "command_name"):
            for c in self._kids(node):
                if c.is_named:
                    self._expand_into(c, f, quoted)
                else:
                    f.lit(_text(c), quoted)
        elif t == "brace_expression":
            f.lit(_text(node), quoted)
        elif t in ("process_substitution",):
            raise self.error("process substitution <(...) is not supported", Unsupported)
        else:
            raise self.error(f"unsupported expansion '{t}'", Unsupported)

    def _value_into(self, value: str, f: _Fields, quoted: bool) -> None:
        if quoted:
            f.lit(value, True)
        else:
            f.split(value, self.vars.get("IFS", " \t\n"))

    def _get(self, name: str) -> str | None:
        if name.isdigit():
            k = int(name)
            if k == 0:
                return self.script
            return self.positional[k - 1] if k <= len(self.positional) else None
        if name == "#":
            return str(len(self.positional))
        if name in ("@", "*"):
            return " ".join(self.positional)
        if name == "?":
            if self.last_status is None:
                raise self.error("$? after a command whose exit status is known only at run "
                                 "time", Unsupported)
            return str(self.last_status)
        if name == "$":
            return str(os.getpid())
        if name == "-":
            return "e" if self.set_e else ""
        if name == "!":
            raise self.error("$! (background jobs) is not supported", Unsupported)
        return self.vars.get(name)

    def _parameter(self, node: Node, f: _Fields, quoted: bool) -> None:
        children = node.children
        if node.type == "simple_expansion":
            name = _text(children[1]) if len(children) > 1 else ""
            self._param_value(name, None, [], f, quoted)
            return
        # ${ [#|!] name [operator args...] }
        inner = children[1:-1]
        prefix = ""
        if inner and not inner[0].is_named and _text(inner[0]) in ("#", "!"):
            prefix = _text(inner[0])
            inner = inner[1:]
        if not inner:
            raise self.error("bad substitution", Unsupported)
        name_node = inner[0]
        if name_node.type == "subscript":
            raise self.error("arrays are not supported", Unsupported)
        name = _text(name_node)
        rest = inner[1:]
        if prefix == "#":
            value = self._get(name)
            if name in ("@", "*"):
                value = str(len(self.positional))
            else:
                value = str(len(value or ""))
            self._value_into(value, f, quoted)
            return
        if prefix == "!":
            target = self._get(name) or ""
            self._param_value(target, None, rest, f, quoted)
            return
        op = _text(rest[0]) if rest and not rest[0].is_named else None
        self._param_value(name, op, rest[1:] if op else rest, f, quoted)

    def _param_value(self, name: str, op: str | None, args: list[Node], f: _Fields,
                     quoted: bool) -> None:
        if name in ("@", "*") and op is None:
            if quoted and name == "@":
                for k, p in enumerate(self.positional):
                    if k:
                        f.brk()
                    f.lit(p, True)
                return
            if quoted:
                f.lit(self.vars.get("IFS", " ")[:1].join(self.positional), True)
                return
            for k, p in enumerate(self.positional):
                if k:
                    f.brk()
                f.split(p, self.vars.get("IFS", " \t\n"))
            return
        value = self._get(name)
        if op is None:
            self._value_into(value or "", f, quoted)
            return

        def word() -> str:
            parts: list[str] = []
            for a in args:
                if a.is_named:
                    parts.append(self.expand_str(a))
                else:
                    parts.append(_text(a))
            return "".join(parts)

        def pattern() -> str:
            parts: list[str] = []
            for a in args:
                if a.type in ("string", "raw_string"):
                    parts.append(_escape_glob(self.expand_str(a)))
                elif a.is_named:
                    parts.append(self.expand_str(a))
                else:
                    parts.append(_text(a))
            return "".join(parts)

        if op in (":-", "-", ":=", "=", ":+", "+", ":?", "?"):
            unset = value is None or (op.startswith(":") and value == "")
            if op in (":-", "-"):
                result = word() if unset else value or ""
            elif op in (":=", "="):
                if unset:
                    value = word()
                    self.set_var(name, value)
                result = value or ""
            elif op in (":+", "+"):
                result = "" if unset else word()
            else:
                if unset:
                    raise self.error(f"{name}: {word() or 'parameter null or not set'}")
                result = value or ""
            use_word = (op in (":-", "-") and unset) or (op in (":+", "+") and not unset)
            if use_word and not quoted:
                # the word keeps its own quoting: ${x:-"a b"} is one field, ${x:-a b} two
                for a in args:
                    if a.type in ("string", "raw_string", "ansi_c_string"):
                        self._expand_into(a, f, quoted=True)
                    else:
                        self._value_into(self.expand_str(a) if a.is_named else _text(a), f,
                                         False)
                return
            self._value_into(result, f, quoted)
            return
        value = value or ""
        if op in ("#", "##", "%", "%%"):
            pat = pattern()
            result = _trim(value, pat, op)
        elif op in ("/", "//", "/#", "/%"):
            pat_nodes: list[Node] = []
            rep_nodes: list[Node] = []
            cur = pat_nodes
            for a in args:
                if not a.is_named and _text(a) == "/" and cur is pat_nodes:
                    cur = rep_nodes
                    continue
                cur.append(a)
            saved = args
            args = pat_nodes
            pat = pattern()
            args = rep_nodes
            rep = word()
            args = saved
            result = _replace(value, pat, rep, op)
        elif op == ":":
            nums = [self.arith_text(self.expand_str(a)) for a in args if a.is_named]
            off = nums[0] if nums else 0
            if off < 0:
                off = max(0, len(value) + off)
            result = value[off:off + nums[1]] if len(nums) > 1 else value[off:]
        elif op in ("^^", ",,", "^", ","):
            result = {"^^": value.upper(), ",,": value.lower(),
                      "^": value[:1].upper() + value[1:], ",": value[:1].lower() + value[1:]}[op]
        else:
            raise self.error(f"unsupported parameter operator '{op}'", Unsupported)
        self._value_into(result, f, quoted)



def _trim(value: str, pat: str, op: str) -> str:
    rx = fnmatch.translate(pat)[4:-3] if pat else ""  # strip (?s:...)\Z wrapper
    if op in ("#", "##"):
        m = re.match(f"(?s:{rx})" if op == "##" else f"(?s:{_lazy(rx)})", value)
        if op == "#":
            for k in range(len(value) + 1):
                if fnmatch.fnmatchcase(value[:k], pat):
                    return value[k:]
            return value
        return value[m.end():] if m else value
    # suffix: % shortest, %% longest
    rng = range(len(value), -1, -1) if op == "%" else range(0, len(value) + 1)
    for k in rng:
        if fnmatch.fnmatchcase(value[k:], pat):
            return value[:k]
    return value


def _lazy(rx: str) -> str:
    return rx.replace(".*", ".*?")


def _replace(value: str, pat: str, rep: str, op: str) -> str:
    if not pat:
        return value
    n = len(value)
    if op == "/#":
        for k in range(n, -1, -1):
            if fnmatch.fnmatchcase(value[:k], pat):
                return rep + value[k:]
        return value
    if op == "/%":
        for k in range(0, n + 1):
            if fnmatch.fnmatchcase(value[k:], pat):
                return value[:k] + rep
        return value
    out = []
    i = 0
    replaced = False
    while i <= n:
        match_end = -1
        if not (replaced and op == "/"):
            for k in range(n, i, -1):  # longest match at i
                if fnmatch.fnmatchcase(value[i:k], pat):
                    match_end = k
                    break
        if match_end > i:
            out.append(rep)
            i = match_end
            replaced = True
            continue
        if i < n:
            out.append(value[i])
        i += 1
    return "".join(out)


