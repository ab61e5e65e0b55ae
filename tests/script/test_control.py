"""Control flow decided at compile time, against bash: `set -e` where bash ignores a failure
(conditions, `!`, every list item but the last), a command of assignments taking its
substitution's status, and lines tree-sitter glues together."""

from __future__ import annotations

from pathlib import Path

import pytest
from script_helpers import compare, run_shoal


def _inputs(d: Path) -> None:
    (d / "in.txt").write_text("x\ny\n")


@pytest.mark.parametrize("name, source", [
    ("conditions", "set -e\nif [ -f nope ]; then echo a; fi\nwhile false; do :; done\n"
                   "until true; do :; done\necho b > b.txt\n"),
    ("lists", "set -e\n[ -f nope ] && echo x\nfalse || echo c > c.txt\n"
              "true && false && echo no\necho d > d.txt\n"),
    ("negation", "set -e\n! true\n! false\necho e > e.txt\n"),
    ("last-item-fails", "set -e\ntrue && [ -f nope ]\necho never > never.txt\n"),
    ("function-in-condition", "set -e\nf() { false; echo inf > inf.txt; }\n"
                              "if f; then echo yes > yes.txt; fi\nf\necho never > n.txt\n"),
    ("subshell", "set -e\n( false )\necho never > n.txt\n"),
    ("arith", "set -e\n(( 0 )) || echo zero > z.txt\n(( 0 ))\necho never > n.txt\n"),
    ("assignment-status", "x=$(grep -c zzz in.txt)\necho \"$? $x\" > s.txt\nset -e\n"
                          "y=$(grep -c zzz in.txt) || echo \"caught $?\" > c.txt\n"
                          "z=$(grep -c x in.txt)\necho \"z=$z\" > z.txt\n"
                          "w=$(grep zzz in.txt)\necho never > n.txt\n"),
    ("glued-lines", "export R=nordic\nX=1 Y=2\necho \"$R $X $Y\" > g.txt\n"
                    "cat g.txt | grep -q nothing | true\necho end >> g.txt\n"),
    ("loop-status", "for i in 1 2; do [ $i = 3 ]; done\necho \"for $?\" > s.txt\n"
                    "while false; do :; done; echo \"while $?\" >> s.txt\n"
                    "for i in 1 2; do grep -q zzz in.txt; done\n"),
    ("bare-exit", "grep -q zzz in.txt\nexit\necho never > n.txt\n"),
    ("subshell-options", "( set -e; false; echo no > no.txt )\nfalse\necho yes > y.txt\n"
                         "( set -C; echo a > y.txt )\necho b > y.txt\n"),
    ("unset-exported", "unset HOME\nsh -c 'echo [$HOME]' > h.txt\nexport -n USER\n"
                       "sh -c 'echo [$USER]' >> h.txt\nexport NEWV=1\n"
                       "sh -c 'echo [$NEWV]' >> h.txt\n"),
    ("noclobber", "echo one > a.txt\nset -C\necho two > a.txt\necho three > b.txt\n"
                  "echo four >| a.txt\ncat a.txt b.txt > c.txt\n"
                  "echo five > b.txt || echo refused > r.txt\n"),
    # a command reading a file nothing made runs, and fails, as in bash: what it would have
    # written does not appear (later globs see that), what its redirection opens does
    ("missing-input", "cp missing.txt c_1.txt\ncat missing.txt > m.txt\nls c_* m.* > l.txt\n"
                      "sort missing.txt | wc -l > n.txt\nset -e\ncp in.txt in2.txt\n"
                      "cp missing.txt c_2.txt\necho never > never.txt\n"),
    # tree-sitter cannot read $(( a * (b - 1) )) in a here-document; <<- strips tabs
    ("heredoc-arith", "n=3 # a comment with <<- in it\ncat <<EOF > r.txt\n"
                      "pairs: $(( n * (n - 1) / 2 )) of $n\nEOF\ncat <<'EOF' >> r.txt\n"
                      "$(( 1 + 1 ))\nEOF\ncat <<-EOF > t.txt\n\tin $n\n\t\ttwo\n\tEOF\n"
                      "echo after > a.txt\n"),
])
def test_static_status_and_set_e_as_bash(tmp_path: Path, name: str, source: str) -> None:
    rb, rs = compare(tmp_path, source, _inputs)
    assert rs.stdout == rb.stdout


def test_a_failure_that_a_compile_time_decision_assumed_away_is_reported(tmp_path: Path
                                                                        ) -> None:
    # cp fails at run time for a reason the compiler cannot see; the glob on line 3 was
    # expanded as if out_1.txt existed: bash prints the pattern, shoal the name. That
    # difference must not be silent.
    (tmp_path / "job.sh").write_text("printf 'a\\n' > in1.txt\ncp --bad-option in1.txt "
                                     "out_1.txt\nfor f in out_*.txt; do echo \"$f\"; done\n")
    r = run_shoal(tmp_path, "job.sh")
    assert "job.sh:3: warning: compiled as if line 2 had made or removed 'out_1.txt'" in r.stderr
    assert "run it with bash" in r.stderr
    # and a redirection's file, which the shell makes whatever the program does, is not
    (tmp_path / "job.sh").write_text("printf 'a\\n' > in1.txt\nsort --bad in1.txt > o_1.txt\n"
                                     "for f in o_*.txt; do echo \"$f\"; done\n")
    assert "warning: compiled as if" not in run_shoal(tmp_path, "job.sh").stderr


def test_a_copy_of_present_and_missing_files_is_refused(tmp_path: Path) -> None:
    # cp copies what exists and fails on the rest: its effect is known only when it runs
    (tmp_path / "a.txt").write_text("a\n")
    (tmp_path / "job.sh").write_text("mkdir -p d\ncp a.txt missing.txt d/\nls d > l.txt\n")
    r = run_shoal(tmp_path, "job.sh")
    assert r.returncode == 2
    assert r.stderr.strip() == (
        "shoal script: error: job.sh:2: cp reads 'missing.txt', which does not exist at this "
        "point of the script, besides files that do (it may do part of its work): not "
        "supported; run it with bash")
    assert not (tmp_path / "d").exists()
