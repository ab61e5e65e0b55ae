"""Builtins evaluated at compile time behave exactly as bash 5.2's, or are refused.

Each script runs under real bash and under `shoal script` in two copies of the same directory;
stdout (with the directory's path replaced), the exit status and every file left must be equal.
Refusals must be one line, `shoal script: error: job.sh:LINE: ...: not supported; run it with
bash`, with exit status 2.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from script_helpers import run_bash, run_shoal, snapshot

Setup = Callable[[Path], None]


def _files(**files: str) -> Setup:
    def setup(d: Path) -> None:
        for name, text in files.items():
            (d / name.replace("__", ".")).write_text(text)
    return setup


def same_as_bash(tmp_path: Path, source: str, setup: Setup | None = None, *args: str) -> str:
    """Run ``source`` both ways; assert equal stdout, status and files; return bash's stdout."""
    a, b = tmp_path / "bash", tmp_path / "shoal"
    for d in (a, b):
        d.mkdir(parents=True)
        if setup is not None:
            setup(d)
        (d / "job.sh").write_text(source)
    rb = run_bash(a, "job.sh", *args)
    rs = run_shoal(b, "job.sh", *args)
    assert rs.returncode == rb.returncode, (rb.stdout, rb.stderr, rs.stdout, rs.stderr)
    assert rs.stdout.replace(str(b), "<D>") == rb.stdout.replace(str(a), "<D>"), (
        rb.stderr, rs.stderr)
    sa, sb = _normal(snapshot(a), a), _normal(snapshot(b), b)
    assert sa == sb, rs.stderr
    return rb.stdout


def _normal(files: dict[str, str | bytes], d: Path) -> dict[str, str | bytes]:
    # the two directories' paths differ (pushd/dirs print them)
    return {k: v.replace(str(d).encode(), b"<D>") if isinstance(v, bytes) else v
            for k, v in files.items()}


REFUSAL = re.compile(r"shoal script: error: job\.sh:\d+: .+: not supported; run it with bash")


def refused(tmp_path: Path, source: str, setup: Setup | None = None) -> str:
    """Assert ``shoal script`` refuses ``source`` with one line; return that line."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    if setup is not None:
        setup(tmp_path)
    (tmp_path / "job.sh").write_text(source)
    r = run_shoal(tmp_path, "job.sh")
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and REFUSAL.fullmatch(lines[0]), r.stderr
    return lines[0]


# ---------------------------------------------------------------------------------- read
READS = {
    "read_file": ("read m < models.txt\necho \"model=$m\"\nread -r a b < models.txt\n"
                  "echo \"[$a][$b]\" > ab.txt\n",
                  _files(models__txt="ccsm  gfdl\\ x  miroc\nsecond line\n")),
    "ifs_herestring": ('IFS=, read a b <<< "x,y,z"\nread g h <<< "1 2,3"\n'
                       'echo "[$a][$b] [$g][$h]"\n'
                       'IFS=, read c d <<< "p,q,"\necho "[$c][$d]"\n'
                       'IFS=", " read e f <<< " u , v , w , "\necho "[$e][$f]"\n', None),
    "raw_and_escapes": ("read -r x <<< 'a\\b c\\ d'\nread y <<< 'a\\b c\\ d'\n"
                        "read p q <<< 'a\\ b c'\necho \"[$x] [$y] [$p][$q]\"\n", None),
    "fields": ('read a b c <<< "one"\nread d e <<< "  1  2   3  "\nread <<< "  as is  "\n'
               'echo "[$a][$b][$c][$d][$e][$REPLY]"\n', None),
    "while_read_ifs": ('while IFS=: read -r k v; do echo "$k=$v" >> out.txt; done < kv.txt\n'
                       'while read -r line; do echo "<$line>"; done < kv.txt\n'
                       'while read line; do echo "{$line}"; done < kv.txt\n',
                       _files(kv__txt="a:1\nb: 2 :3\n  c\\:d:4\\\n5\nlast:no-newline")),
    "eof_status": ('read x < nonl.txt || echo "status $? [$x]"\n'
                   'read y < empty.txt || echo "status $? [$y]"\n'
                   'IFS=: read -d "" p q < nonl.txt; echo "$? [$p][$q]"\n',
                   _files(nonl__txt="a:b", empty__txt="")),
    "prompt_silent": ('read -p "name? " -s n <<< "x y"\nread -rp "> " m <<< "z"\n'
                      'echo "[$n][$m]"\n', None),
    "readonly_target": ('readonly R=1\nread R <<< hi\necho "status $? R=$R"\n', None),
}


@pytest.mark.parametrize("name", sorted(READS))
def test_read_as_bash(tmp_path: Path, name: str) -> None:
    source, setup = READS[name]
    same_as_bash(tmp_path, source, setup)


# ---------------------------------------------------------------------------------- declare
DECLARES = {
    "integer_append": ('declare -i n\nn+=1\nn+=1\nn+="2*3"\necho "$n" > n.txt\n'
                       'declare -i m=5*2 k\nk=m+1\necho "$m $k"\n', None),
    "local_integer": ('f() { local -i c=2; c+=3; echo "in $c"; }\nf\nc=4\nc+=1\necho "out $c"\n'
                      'g() { local x; echo "[${x-unset}]"; declare y=1; declare -g z=2; }\n'
                      'x=1\ng\necho "[${y-unset}][$z]"\n', None),
    "case_conversion": ('declare -l low=HeLLo\ndeclare -u up=world\nup+=" again"\n'
                        'typeset -u t\nt=mixed\nx=AbC\ndeclare -u x\necho "$low $up $t $x"\n'
                        'x=dEf\necho "$x"\n', None),
    "export": ('declare -x E1=one\nE2=two\nexport E2\nawk \'BEGIN { print ENVIRON["E1"], '
               'ENVIRON["E2"] }\' > env.txt\nexport -n E2\n'
               'awk \'BEGIN { print "[" ENVIRON["E2"] "]" }\' >> env.txt\n', None),
    "readonly_builtins": ('declare -r Q=1\ndeclare Q=2\necho "status $? Q=$Q"\n'
                          'readonly W=1\nreadonly W=5\necho "status $? W=$W"\n'
                          'f() { local W=4; echo "in $W"; }\nf\necho "after $?"\n', None),
    "readonly_assignment_aborts_its_line": ('readonly R=1\necho before\nR=2; echo skipped\n'
                                            'echo "after $?"\nf() { R=3; echo no; }\nf\n'
                                            'echo "status $?"\n', None),
    "unset": ('readonly A=1\nunset A\necho "$? $A"\nf() { echo fn; }\nf=2\nunset f\nf\n'
              'export C=3\nunset C\nC=4\nawk \'BEGIN { print "[" ENVIRON["C"] "]" }\'\n'
              'declare -i n=1\nunset n\nn=1+1\necho "$n"\n', None),
    "local_outside_function": ('local x=1\necho "status $?"\ndeclare a-b=1\necho "st $?"\n',
                               None),
}


@pytest.mark.parametrize("name", sorted(DECLARES))
def test_declare_as_bash(tmp_path: Path, name: str) -> None:
    source, setup = DECLARES[name]
    same_as_bash(tmp_path, source, setup)


# ---------------------------------------------------------------------------------- arithmetic
ARITH = {
    "bases": ('echo $((10#08 + 1)) $((0x1F + 010 + 2#101 + 64#_ + 36#Zz + 16#ff))\n'
              'y=09\necho $((10#$y)) $(( 10#${y} * 2 ))\nfor ((i = 10#$y; i < 11; i++)); do '
              'echo "i=$i"; done\n', None),
    "octal_error_aborts_its_line": ('echo start\necho $((08 + 1)); echo skipped\n'
                                    'echo "after $?"\n', None),
    "variable_error_aborts_the_loop": ('for x in 1 09 2; do echo $((x + 1)); done\n'
                                       'echo "after $?"\n( echo $((08)); echo no )\n'
                                       'echo "subshell $?"\ny=$(echo $((08)))\n'
                                       'echo "subst [$y]"\n', None),
    "arith_command_fails": ('(( 08 ))\necho "status $?"\nlet "v = 1 + 09"\necho "let $?"\n'
                            '(( 1 / 0 ))\necho "div $?"\n', None),
    "wraparound": ('echo $((2**63)) $((2**64)) $((9999999999999999999999)) $((1 << 64)) '
                   '$((-9223372036854775807 - 1)) $(( (-2**63) / -1 ))\n', None),
    "precedence": ('x=5 y=2\necho $(( -2 - 1 )) $(( -2**2 )) $(( - -3 - 1 )) $(( ~1 + 1 )) '
                   '$(( 2 ** 3 ** 2 )) $(( -x ** 2 )) $(( 1 - -1 )) $(( -1 ? 2 : 3 ))\n'
                   'echo $(( x = y = 4 )) $x $y $(( x += y -= 1 )) $x $y\n', None),
    "test_integers": ('[ 08 -eq 8 ]; echo "a $?"\n[ " 8 " -eq 8 ]; echo "b $?"\n'
                      '[ "" -eq 0 ]; echo "c $?"\n[ 0x1 -eq 1 ]; echo "d $?"\n'
                      'test abc -lt 1; echo "e $?"\nx=3\n[[ x -eq 3 && 1+1 -eq 2 ]]; '
                      'echo "f $?"\n[[ 08 -eq 8 ]]; echo "g $?"\n[[ 0x10 -eq 16 ]]; '
                      'echo "h $?"\n', None),
    "integer_var_error": ('declare -i n\nn=08; echo skipped\necho "after $? [$n]"\n', None),
}


@pytest.mark.parametrize("name", sorted(ARITH))
def test_arithmetic_as_bash(tmp_path: Path, name: str) -> None:
    source, setup = ARITH[name]
    same_as_bash(tmp_path, source, setup)


# ---------------------------------------------------------------------------------- options
OPTIONS = {
    "nounset": ('set -u\necho start > s.txt\nx=${undefined_var:-default}\necho "$x"\n'
                'echo "$undefined_var"\necho after > a.txt\n', None),
    "nounset_arith": ('set -u\necho $((undefined_n + 1))\necho after\n', None),
    "nounset_positional": ('set -u\nf() { echo "got ${1}"; }\nf one\nf\necho after\n', None),
    "nullglob": ('shopt -s nullglob\nfor f in *.none; do echo "got $f"; done\n'
                 'echo none: *.none.\nshopt -u nullglob\necho *.none\n', None),
    "failglob": ('shopt -s failglob\necho *.txt\necho *.none; echo skipped\n'
                 'echo after > after.txt\n',
                 _files(a__txt="a")),
    "set_grouped_o": ('set -eo pipefail\necho "$-"\nset +eo pipefail -u\necho "$-"\n', None),
    "shopt_query": ('shopt -q nullglob || echo off\nshopt -s nullglob\n'
                    'shopt -q nullglob && echo on\n', None),
}


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_options_as_bash(tmp_path: Path, name: str) -> None:
    source, setup = OPTIONS[name]
    same_as_bash(tmp_path, source, setup)


# ---------------------------------------------------------------------------------- traps, exec
def test_exit_trap_runs_at_the_end_and_after_exit(tmp_path: Path) -> None:
    same_as_bash(tmp_path, "trap 'echo bye > trap.txt; rm -f tmp.txt' EXIT\n"
                           "echo hi > tmp.txt\necho hi\nexit 3\necho notreached\n")
    same_as_bash(tmp_path / "2", "trap 'echo first' EXIT\ntrap \"echo second $x\" 0\n"
                                 "x=later\necho body\n")
    same_as_bash(tmp_path / "3", "trap 'echo never' EXIT\ntrap - EXIT\necho body\n")
    same_as_bash(tmp_path / "4", "trap 'echo \"exiting with $?\" > trap.txt' EXIT\nexit 4\n")


def test_exec_redirects_the_rest_of_the_script(tmp_path: Path) -> None:
    same_as_bash(tmp_path, "echo before\nexec > log.txt 2>&1\necho one\necho err >&2\n"
                           "cat in.txt | tr a-z A-Z\necho two > own.txt\necho three\n",
                 _files(in__txt="abc\n"))
    same_as_bash(tmp_path / "2", "exec 2> err.txt\necho out\necho e1 >&2\n"
                                 "exec >> out.txt\necho o2\necho e2 >&2\n")


CONTROL = {
    "exit_bad_args": ('exit 1 2\necho "after $?"\nexit abc\necho no\n', None),
    "return_outside_function": ('return 3\necho "after $?"\nf() { return abc; }\nf\n'
                                'echo "f $?"\nsource r.sh\necho "sourced $?"\n',
                                _files(r__sh="return 4\necho no\n")),
    "shift_bad_args": ('set -- a b\nshift x\necho "$? $#"\nshift -1\necho "$?"\nshift 5\n'
                       'echo "$? $#"\n', None),
    "break_out_of_all_loops": ('for i in 1 2; do for j in 1 2; do break 5; done; done\n'
                               'echo "ok $i $j"\n', None),
    "pipeline_loop_is_a_subshell": ('n=0\nprintf "a\\nb\\n" | while read l; do '
                                    'n=$((n+1)); echo "in $n"; done\necho "n=$n"\n', None),
}


@pytest.mark.parametrize("name", sorted(CONTROL))
def test_control_builtins_as_bash(tmp_path: Path, name: str) -> None:
    source, setup = CONTROL[name]
    same_as_bash(tmp_path, source, setup)


def test_cd_to_a_missing_directory_fails_as_in_bash(tmp_path: Path) -> None:
    same_as_bash(tmp_path, "cd /nonexistent\necho \"after $?\"\ncd job.sh; echo $?\n"
                           "pushd nowhere; echo $?\npopd; echo $?\nmkdir d\ncd d\necho x > f\n")


def test_redirections_of_whole_blocks(tmp_path: Path) -> None:
    same_as_bash(tmp_path, 'vars="tas\npr"\nwhile read -r v; do echo "variable $v"; '
                           'echo "err $v" >&2; done <<< "$vars" > out.txt 2>&1\n'
                           'for k in 1 2; do echo "k=$k"; echo own > own_$k.txt; done >> out.txt\n'
                           '{ echo a; pushd / > /dev/null; echo b >&2; } > g.txt 2> e.txt\n'
                           'if true; then echo yes; fi > if.txt\n'
                           'case x in x) echo case ;; esac > case.txt\n( echo sub ) > sub.txt\n'
                           'echo end\n')


def test_pushd_popd_dirs_print_the_stack(tmp_path: Path) -> None:
    out = same_as_bash(tmp_path, "mkdir -p sub/deeper\npushd sub\npushd deeper > /dev/null\n"
                                 "dirs\ndirs -v\npwd\npopd\npopd > q.txt\ndirs -p\ncd -\n"
                                 "popd\necho \"status $?\"\n")
    assert "/sub/deeper " in out and "status 1" in out


GETOPTS = """\
verbose=0 out=none
while getopts "vo:x" opt; do
  case $opt in
    v) verbose=$((verbose + 1)) ;;
    o) out=$OPTARG ;;
    x) echo "x at $OPTIND" ;;
    \\?) echo "bad option" ;;
  esac
done
shift $((OPTIND - 1))
echo "verbose=$verbose out=$out rest=$*"
OPTIND=1
while getopts ":o:" opt "$@"; do
  case $opt in
    o) echo "o=$OPTARG" ;;
    :) echo "missing argument for $OPTARG" ;;
    \\?) echo "unknown $OPTARG" ;;
  esac
done
echo "end at $OPTIND"
"""


@pytest.mark.parametrize("args", [
    ("-v", "-vx", "-o", "file.nc", "-xofused", "a", "b"),
    ("-v", "--", "-x", "c"),
    ("-q", "-v", "plain", "-o", "x"),
    ("-vo",),
])
def test_getopts_over_the_script_arguments(tmp_path: Path, args: tuple[str, ...]) -> None:
    same_as_bash(tmp_path, GETOPTS, None, *args)


def test_echo_and_printf_in_substitutions(tmp_path: Path) -> None:
    same_as_bash(tmp_path, "x=$(echo -e 'a\\tb\\x41\\0101\\c ignored')\n"
                           "y=$(echo -n hi; echo -E ' \\t'; echo -eE '\\n'; echo -nx)\n"
                           "printf -v pv '%05d|%-4s|%s' 42 ab\n"
                           "printf -v q '%q %x %5.1f' 'a b' 255 3.14159\n"
                           "z=$(printf '%s-%s\\n' a b c)\n"
                           "printf '%s\\n' \"[$x]\" \"[$y]\" \"[$pv]\" \"[$q]\" \"[$z]\" > e.txt\n")


def test_redirections_inside_command_substitutions(tmp_path: Path) -> None:
    same_as_bash(tmp_path, 'n=$(wc -l < m.txt)\necho "[$n]"\nx=$(tr a-z A-Z <<< "hi there")\n'
                           'y=$(cat nosuch 2>/dev/null; echo z)\nd=$(dirname $PWD/$n.nc)\n'
                           'v=$(sort <<EOF\nb\na\nEOF\n)\nq=$(echo quiet > /dev/null; echo loud)\n'
                           'echo "$x|$y|$v|$q|${d##*/}" | sed "s/|bash$\\||shoal$/|D/"\n'
                           'u=$(cat nosuch)\necho "[$u]"\n',
                 _files(m__txt="a\nb\n"))


def test_last_static_command_gives_the_exit_status(tmp_path: Path) -> None:
    same_as_bash(tmp_path, "echo hi > a.txt\n[ -f nosuch ] && echo yes\n")


# ---------------------------------------------------------------------------------- refusals
REFUSALS = {
    "eval_of_run_time_text": ("echo 'echo hi' > cmd.txt\neval \"$(grep echo cmd.txt)\"\n", None),
    "source_of_written_file": ("echo 'x=1' > conf.sh\nsource conf.sh\n", None),
    "trap_int": ("trap 'echo bye' INT\n", None),
    "trap_exit_with_errexit": ("set -e\ntrap 'rm -f x' EXIT\n", None),
    "errexit_after_trap": ("trap 'rm -f x' EXIT\nset -e\n", None),
    "declare_array": ("declare -a arr=(1 2)\n", None),
    "declare_assoc": ("declare -A m\n", None),
    "read_terminal": ("read x\n", None),
    "read_written_file": ("echo a > f.txt\nread x < f.txt\n", None),
    "read_timeout": ("read -t 1 x <<< a\n", None),
    "extglob": ("shopt -s extglob\n", None),
    "exec_fd3": ("exec 3> f.txt\n", None),
    "exec_program": ("exec ls\n", None),
    "set_prints": ("set\n", None),
    "write_to_redirected_output": ("for i in 1; do echo a; echo b >> o.txt; done > o.txt\n",
                                   None),
    "exec_after_dup": ("exec 2>&1\nexec > log.txt\n", None),
}


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_refusals_are_one_line_ending_with_run_it_with_bash(tmp_path: Path, name: str) -> None:
    source, setup = REFUSALS[name]
    refused(tmp_path, source, setup)
