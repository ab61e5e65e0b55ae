"""Word expansion alone, against bash: each case is a few lines of setup and one word; bash
prints the fields it expands to, and the compiler's step for the same line must carry exactly
those fields (no program runs on the shoal side: expansion is static)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from shoal.script.compiler import CompileOptions, compile_source
from shoal.script.errors import ScriptError
from shoal.script.words import ARITH, CMDSUB, LIT, PARAM, TILDE, brace_expand, parse_word

VARS = ("out=res; i=3; a=x; b=y; m=cnrm_cm3; dir=/data; e=; sp='a  b'; g='*.nc'; "
        "lo=-30; hi=30; f=hello.tar.gz; n=7")

# (setup lines, word): the word is expanded as an argument of printf
CASES = [
    ("", "$out/ens_t$i.nc"),
    ("", "$a.$b.nc"),
    ("", "$a,$b,c"),
    ("", "ens_$a$b.nc"),
    ("", "${a}/$b.nc"),
    ("", "$(echo q).$b.nc"),
    ("set -- one two", "$1/$2"),
    ("", "-d lat,$lo.0,$hi.0"),
    ("", r"$m\_tas"),
    ("", r'"$m\_tas"'),
    ("", "$dir/sresalb_$m.nc"),
    ("", "pre$e/post"),
    ("", "$e"),
    ("", '"$e"'),
    ("", "''$e"),
    ("", "$sp"),
    ("", '"$sp"'),
    ("", "x${sp}y"),
    ("", '"${f%%.*}" ${f#*.} ${f/l/L} ${f//l/L} ${#f} ${f:1:3} ${f: -2} ${f:(-6):3}'),
    ("", "${e:-d} ${e-set} ${nope-unset} ${a:+alt} ${e:+alt} ${nope:-\"a b\"} ${nope:-a b}"),
    ("", '"${nope:-a b}" "${nope:-\'q\'}"'),
    ("", "${a^^} ${m^} ${f%.gz}.bak"),
    ("set -- 'p q' r", '"$@"'),
    ("set -- 'p q' r", "$@"),
    ("set -- 'p q' r", '"$*"'),
    ("set -- 'p q' r", "$*"),
    ("set -- 'p q' r", '"x$@y"'),
    ("set --", '"$@"'),
    ("set --", '"$@" end'),
    ("set --", '"$*"'),
    ("set -- a b c", "$# ${#} ${3} ${@:-none}"),
    ("", "~ ~/x x~ ~root '~' \"~\""),
    ("", "a{1,2}b {1..3} {a..c}$a pre{x,\"y z\"} {01..03} {3..1} {1..7..3} x{a}y {,b}"),
    ("", "'{1,2}' \\{1,2\\} \"{x,y}\""),
    ("", "$((i + 1)) $((i*2)).$b $(( (i+1) * (n-1) )) $((0x10 + 010))"),
    ("", "$(echo a b) \"$(echo a  b)\" `echo c` $(printf '%s\\n' z)x"),
    ("IFS=,", "$a,$b"),
    ("s='a,b,,c'; IFS=,", "$s"),
    ("s=' a  b '", "[$s]"),
    ("IFS=", "$sp"),
    ("x='  lead'", "z$x"),
    ("touch made_1.nc made_2.nc", "made_*.nc"),
    ("touch made_1.nc made_2.nc", "'made_*.nc' made_\\*.nc"),
    ("touch made_1.nc", "no_match_*.nc"),
    ("touch made_1.nc made_2.nc", "$g"),
    ("touch made_1.nc made_2.nc", '"$g"'),
    ("touch a.nc; mkdir -p sub; touch sub/b.nc", "*/*.nc ./*.nc"),
    ("shopt -s nullglob", "no_match_*.nc"),
    ("set -f; touch made_1.nc", "made_*.nc"),
    ("", "$'tab\\there' $'q\\'q' $'\\x41\\101'"),
    ("", "a\"b\"'c'd \"a\\\"b\" 'it''s'"),
    ("", "$ a$ \"$\" \"a$\""),
    ("", "${!a} ${#nope}"),
]


def _bash_fields(d: Path, setup: str, word: str) -> list[str]:
    script = f"{VARS}\n{setup}\nprintf '<%s>\\n' {word}\n"
    r = subprocess.run(["bash", "-c", script], cwd=d, capture_output=True, text=True,
                       check=True)
    out = r.stdout
    assert out.startswith("<") and out.endswith(">\n"), out
    return out[1:-2].split(">\n<")


def _shoal_fields(d: Path, setup: str, word: str) -> list[str]:
    script = f"{VARS}\n{setup}\nprintf '<%s>\\n' {word}\n"
    plan = compile_source(script.encode(), "t.sh", [], CompileOptions(cwd=str(d)))
    argv = [s for s in plan.steps if s.stages[0].argv[:1] == ["printf"]][-1].stages[0].argv
    assert argv[1] == "<%s>\\n"
    # printf with no arguments prints the format once with an empty string
    return argv[2:] if len(argv) > 2 else [""]


@pytest.mark.parametrize("setup, word", CASES, ids=[w for _, w in CASES])
def test_word_expands_as_bash_expands_it(tmp_path: Path, setup: str, word: str) -> None:
    (tmp_path / "bash").mkdir()
    (tmp_path / "shoal").mkdir()
    assert _shoal_fields(tmp_path / "shoal", setup, word) == \
        _bash_fields(tmp_path / "bash", setup, word)


def test_parse_word_parts() -> None:
    assert parse_word("plain") == ((LIT, "plain", False),)
    assert parse_word("$out/ens_t$i.nc") == (
        (PARAM, "out", None, None, False), (LIT, "/ens_t", False),
        (PARAM, "i", None, None, False), (LIT, ".nc", False))
    assert parse_word('"$a b"\'c\'') == (
        (PARAM, "a", None, None, True), (LIT, " bc", True))
    assert parse_word("${v%.nc}x") == ((PARAM, "v", "%", ".nc", False), (LIT, "x", False))
    assert parse_word("~/$(ls x)$((1+2))") == (
        (TILDE, ""), (LIT, "/", False), (CMDSUB, "ls x", False), (ARITH, "1+2", False))
    assert parse_word(r"a\ b") == ((LIT, "a", False), (LIT, " ", True), (LIT, "b", False))


def test_brace_expansion_is_bash_s() -> None:
    for word in ["a{b,c}d", "{1..3}{a,b}", "x{a,{b,c}}y", "{a}", "{1..10..4}", "{05..1}",
                 "'{a,b}'c", "${x}{1,2}", "{-2..2}", "{a,b", "}{a,b}{"]:
        r = subprocess.run(["bash", "-c", f"printf '%s\\n' {word}"], capture_output=True,
                           text=True, check=True)
        ours = [w.replace("'", "") for w in brace_expand(word)]
        if "$" not in word:
            assert ours == r.stdout.split("\n")[:-1], word


@pytest.mark.parametrize("word, msg", [
    ("'open", "syntax error"),
    ('"open', "syntax error"),
    ("${arr[1]}", "arrays"),
    ("$(echo", "syntax error"),
])
def test_unreadable_words_are_refused_with_their_line(tmp_path: Path, word: str, msg: str
                                                      ) -> None:
    with pytest.raises(ScriptError, match=f"t.sh:2: .*{msg}"):
        compile_source(f"x=1\nprintf '%s' {word} end\n".encode(), "t.sh", [],
                       CompileOptions(cwd=str(tmp_path)))


CONDITIONS = r"""a=x; b=y; pat='x*'; e=; re='^[a-z]\.y$'
[[ $a$b == xy ]] && echo t1
[[ $a.$b == "x.y" ]] && echo t2
[[ -n $e$a ]] && echo t3
[[ $a == $pat ]] && echo t4
[[ $a == "$pat" ]] || echo t5
[ $a.$b = x.y ] && echo t6
test "$a$b" = xy && echo t7
case "$a.$b" in "x."*) echo t8;; esac
case $a in "$pat") echo bad;; $pat) echo t9;; esac
[[ $a.$b =~ $re ]] && echo t10
[[ x.y == x\.* && $a != "*" ]] && echo t11
"""


def test_conditions_and_patterns_decide_as_bash_does(tmp_path: Path) -> None:
    bash = subprocess.run(["bash", "-c", CONDITIONS], cwd=tmp_path, capture_output=True,
                          text=True, check=True).stdout.split()
    plan = compile_source(CONDITIONS.encode(), "t.sh", [], CompileOptions(cwd=str(tmp_path)))
    assert [s.stages[0].argv[1] for s in plan.steps] == bash
    assert len(bash) == 11
