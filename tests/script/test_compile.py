"""Compile-side behaviour: static interpretation, SSA/DAG, live files, clusters, listings."""

from __future__ import annotations

from pathlib import Path

import pytest

from shoal.script.cluster import chain_clusters, simulate, swamp_clusters
from shoal.script.compiler import CompileOptions, Plan, compile_source
from shoal.script.errors import ScriptError
from shoal.script.output import dry_run, to_dot


def comp(d: Path, src: str, *args: str, **kw) -> Plan:
    return compile_source(src.encode(), "t.sh", list(args), CompileOptions(cwd=str(d), **kw))


def argvs(plan: Plan) -> list[str]:
    return [s.describe() for s in plan.steps]


@pytest.fixture
def d(tmp_path: Path) -> Path:
    for n in ("a.nc", "b.nc", "c.nc"):
        (tmp_path / n).write_text("x")
    return tmp_path


def test_variables_trims_positional_and_quoting(d: Path) -> None:
    src = r'''
f=${1:-none}.nc; base=${f%.nc}; dir=/x/y/z.tar.gz
echo "$base" ${dir##*/} ${dir#*/} ${dir%%.*} "${2}" $# "$@" ${UNSET:-dflt} ${f/.nc/.txt} \
  'lit $x' "a\"b" ${#base} ${base^^}
'''
    plan = comp(d, src, "a", "two words")
    assert argvs(plan) == ["echo a z.tar.gz x/y/z.tar.gz /x/y/z 'two words' 2 a 'two words' "
                           "dflt a.txt 'lit $x' 'a\"b' 1 A"]


def test_loops_conditions_case_functions_arith(d: Path) -> None:
    src = '''
i=0
while [ $i -lt 3 ]; do i=$((i + 1)); echo $i; done
for ((k=10; k>8; k--)); do echo k$k; done
for x in $(seq 2 3) "$(printf '%03d' 7)"; do
  case $x in 2) echo two ;; 00*) echo padded $x ;; *) echo other ;; esac
done
f() { local y=$1; echo "f:$y:$#"; return 3; }
f a b
if [ -f a.nc ] && [[ $i == 3 ]]; then echo yes; elif true; then echo no; else echo never; fi
if test -d nowhere || [ "$(basename /p/q.nc .nc)" != q ]; then echo bad; fi
let n=2**5; echo $n $(( n > 10 ? 1 : 0 )) $(expr $n + 1) $(dirname a/b/c)
'''
    plan = comp(d, src)
    assert argvs(plan) == ["echo 1", "echo 2", "echo 3", "echo k10", "echo k9", "echo two",
                           "echo other", "echo padded 007", "echo f:a:2", "echo yes",
                           "echo 32 1 33 a/b"]


def test_globs_see_the_script_state_at_each_line(d: Path) -> None:
    src = '''
ncwa a.nc avg_a.nc
ncwa b.nc avg_b.nc
echo avg_*.nc
rm avg_a.nc
echo avg_*.nc *.none
for f in [ab].nc; do echo $f; done
'''
    plan = comp(d, src)
    assert argvs(plan)[2] == "echo avg_a.nc avg_b.nc"
    assert argvs(plan)[4] == "echo avg_b.nc '*.none'"
    assert argvs(plan)[5:] == ["echo a.nc", "echo b.nc"]


def test_ssa_renaming_removes_false_dependencies(d: Path) -> None:
    # tmp.nc is written twice by independent branches: only read-after-write orders them
    # (-O: without it NCO refuses to overwrite tmp.nc, see test_fs_semantics.py)
    src = '''
ncwa a.nc tmp.nc
ncks tmp.nc x1.nc
ncwa -O b.nc tmp.nc
ncks tmp.nc x2.nc
rm tmp.nc
ncra x1.nc x2.nc out.nc
'''
    plan = comp(d, src)
    p = plan.dag.preds
    assert p[1] == {0} and p[3] == {2} and p[2] == set()
    assert p[5] == {1, 3}
    assert 4 in plan.dag.noop  # rm of intermediates only
    scratch = {g.path.rsplit("/", 1)[1] for g in plan.dag.scratch_groups()}
    assert scratch == {"tmp.nc", "x1.nc", "x2.nc"} - {"x1.nc", "x2.nc"} | {"tmp.nc"}
    assert plan.dag.final_outputs() == sorted(str(d / n) for n in ("out.nc", "x1.nc", "x2.nc"))


def test_last_version_gets_the_user_name_and_inplace_chains(d: Path) -> None:
    src = '''
ncwa a.nc o.nc
ncatted -a units,tas,o,c,K o.nc
ncks -A b.nc o.nc
ncwa -O c.nc o.nc
'''
    plan = comp(d, src)
    groups = {g.id: g for g in plan.dag.groups if g.path.endswith("o.nc")}
    # versions 1-3 (write, edit, append) share one scratch file; the last write is o.nc itself
    real = [g for g in groups.values() if g.real]
    assert len(groups) == 2 and len(real) == 1
    assert plan.dag.preds[1] == {0} and plan.dag.preds[2] == {1}
    assert plan.dag.preds[3] == set()  # independent of the in-place chain


def test_unknown_programs_are_barriers_with_one_warning(d: Path) -> None:
    src = "ncwa a.nc x.nc\nmyprog x.nc\nncwa b.nc y.nc\nmyprog y.nc\nfoo\n"
    plan = comp(d, src)
    assert plan.dag.preds[1] == {0} and plan.dag.preds[2] == {1}
    w = plan.unknown_warning()
    assert w is not None and "myprog (line 2, 4)" in w and "foo (line 5)" in w
    with pytest.raises(ScriptError, match=r"t.sh:2: unknown program 'myprog'"):
        comp(d, src, strict=True)


def test_user_command_table(d: Path, tmp_path: Path) -> None:
    table = tmp_path / "my.toml"
    table.write_text('[program.regrid]\npositional = "inputs_output"\nwith_value = ["-m"]\n')
    plan = comp(d, "regrid -m map a.nc r.nc\nncks r.nc s.nc\n", commands=[str(table)])
    assert not plan.unknown
    assert plan.dag.preds[1] == {0}


def test_pipelines_redirections_and_control_dependencies(d: Path) -> None:
    src = '''
cat a.nc b.nc | sort > s.txt 2> err.txt
grep x s.txt >> log.txt
ncks a.nc q.nc && echo ok > ok.txt
mkdir -p sub && cd sub
ncks ../a.nc here.nc
'''
    plan = comp(d, src)
    assert len(plan.steps) == 6
    assert plan.dag.preds[1] == {0}
    assert plan.dag.preds[3] == {2}           # && : runs only if ncks succeeded
    assert plan.dag.preds[5] == {4}           # inside the directory mkdir made
    assert plan.steps[5].cwd == str(d / "sub")


def test_dry_run_and_dot_list_lines_and_dependencies(d: Path) -> None:
    plan = comp(d, "ncwa a.nc x.nc\n\nncks x.nc y.nc\nrm x.nc\n")
    text = dry_run(plan, str(d))
    assert "#1 line 3 after #0 cluster 0: ncks x.nc y.nc" in text
    assert "intermediates: x.nc" in text
    dot = to_dot(plan)
    assert dot.startswith("digraph") and "n0 -> n1;" in dot


def test_chain_clusters_keep_parallelism_that_swamp_loses(d: Path) -> None:
    # ipcc shape: per-model chains, an ensemble join, then per-model work again
    lines = []
    models = [f"m{k}" for k in range(6)]
    for m in models:
        (d / f"in_{m}.nc").write_text("x")
        lines += [f"ncwa in_{m}.nc a_{m}.nc", f"ncra a_{m}.nc b_{m}.nc"]
    lines.append("nces " + " ".join(f"b_{m}.nc" for m in models) + " ens.nc")
    for m in models:
        lines += [f"ncdiff b_{m}.nc ens.nc d_{m}.nc", f"ncwa d_{m}.nc e_{m}.nc"]
    plan = comp(d, "\n".join(lines) + "\n")
    chains, swamp = chain_clusters(plan.dag), swamp_clusters(plan.dag)
    for cl in (chains, swamp):  # every step exactly once
        assert sorted(v for c in cl for v in c.steps) == list(range(len(plan.steps)))
    t_chain = simulate(plan.dag, chains, workers=6, overhead=0.1)
    t_swamp = simulate(plan.dag, swamp, workers=6, overhead=0.1)
    assert t_chain < t_swamp
    assert len(chains) < len(plan.steps)


@pytest.mark.parametrize("src, msg", [
    ("ncks a.nc out.nc\nif then fi\n", r"t.sh:2: syntax error"),
    ("echo ok\nif grep -q x a.nc; then echo y; fi\n", r"t.sh:2: .*known only when the script"),
    ("arr=(1 2)\n", r"t.sh:1: arrays: not supported; run it with bash$"),
    ("x=$(ncwa a.nc o.nc)\n", r"t.sh:1: command substitution runs 'ncwa'"),
    ("echo a\nfor x in a; do\necho $x\n", r"t.sh:2: syntax error: 'for' is not closed"),
    ("ncwa a.nc x.nc\nn=$(cat x.nc)\n", r"t.sh:2: reads 'x.nc' at compile time, but line 1"),
    ("cat <(echo hi)\n", r"t.sh:1: process substitution"),
    # a block writing to a device that can fail: its status is not known before it runs
    ("{ echo a; } > /dev/udp/127.0.0.1/9\n", r"t.sh:1: redirection .* of a whole .*can fail"),
])
def test_bad_input_is_one_error_naming_the_line(d: Path, src: str, msg: str) -> None:
    with pytest.raises(ScriptError, match=msg) as info:
        comp(d, src)
    assert "\n" not in str(info.value)


def test_strict_rejects_outputs_outside_the_tree(d: Path, tmp_path_factory) -> None:
    other = tmp_path_factory.mktemp("other")
    src = f"ncks a.nc {other}/o.nc\n"
    comp(d, src)  # fine by default
    with pytest.raises(ScriptError, match=r"t.sh:1: writes .* outside the working tree"):
        comp(d, src, strict=True)
    # a removal names the top-most path it reaches, not the first file below it
    with pytest.raises(ScriptError, match=r"t.sh:1: removes '/usr', outside the working tree"):
        comp(d, "rm -rf /usr\n", strict=True)


def test_unreadable_input(d: Path) -> None:
    import os
    import shutil
    import subprocess
    import sys

    (d / "secret.nc").write_text("x")
    (d / "secret.nc").chmod(0)
    if os.geteuid() != 0:
        with pytest.raises(ScriptError, match="cannot read 'secret.nc'"):
            comp(d, "ncks secret.nc o.nc\n")
        return
    # root reads everything: compile in a child without the capabilities that let it
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("root reads everything and setpriv (util-linux) is not installed")
    code = ("import sys; from shoal.script.compiler import CompileOptions, compile_source\n"
            "from shoal.script.errors import ScriptError\n"
            "try:\n"
            f"    compile_source(b'ncks secret.nc o.nc\\n', 't.sh', [], CompileOptions(cwd={str(d)!r}))\n"
            "except ScriptError as e:\n    print(e); sys.exit(3)\n")
    caps = "-dac_override,-dac_read_search"
    r = subprocess.run([setpriv, f"--bounding-set={caps}", f"--inh-caps={caps}", "--",
                        sys.executable, "-c", code], cwd=str(d), capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 3, r.stderr
    assert "cannot read 'secret.nc'" in r.stdout


def test_tree_sitter_quirks_are_repaired(d: Path) -> None:
    # tree-sitter-bash 0.25 splits ${f}_$n.nc in two words, and keeps white space of " " in
    # the closing quote token; both must expand as bash does
    src = 'f=a; n=7\nx=${f}_$n.nc\necho ${f}_$n.nc "$x" "[ ]" " " "a  b " > ${f}_$n.txt\n' \
          "IFS=:; v=p:q::r; for w in $v; do echo \"<$w>\"; done\n"
    plan = comp(d, src)
    st = plan.steps[0].stages[0]
    assert st.argv == ["echo", "a_7.nc", "a_7.nc", "[ ]", " ", "a  b "]
    assert st.redirects[0].target == "a_7.txt"
    assert argvs(plan)[1:] == ["echo '<p>'", "echo '<q>'", "echo '<>'", "echo '<r>'"]


def test_read_loops_source_and_subshells(d: Path) -> None:
    (d / "models.txt").write_text("m1\nm2 extra\n")
    (d / "lib.sh").write_text('greet() { echo "hi $1"; }\nLIBVAR=set\n')
    src = '''
while read -r m rest; do echo "model $m [$rest]"; done < models.txt
cat models.txt | while read line; do echo "line $line"; done
. ./lib.sh
greet "$LIBVAR"
n=$(< models.txt); echo ${#n}
( cd /; echo "in $PWD" )
echo "back $(basename "$PWD")"
exit 3
echo never
'''
    plan = comp(d, src)
    assert argvs(plan) == ["echo 'model m1 []'", "echo 'model m2 [extra]'", "echo 'line m1'",
                           "echo 'line m2 extra'", "echo 'hi set'", "echo 11", "echo 'in /'",
                           f"echo 'back {d.name}'"]
    assert plan.exit_status == 3


def test_assignments_do_not_split_and_paths_from_root_are_normal(d: Path) -> None:
    # an assignment keeps the white space of an unquoted $v (no word splitting there); a
    # command run in / names its files like any other (was '//a.nc')
    src = f'v=" a  b "; x=$v; echo "[$x]"\ncd /\nncwa {str(d)[1:]}/a.nc {str(d)[1:]}/x.nc\n' \
          f"cd {d}\nncks x.nc y.nc\n"
    plan = comp(d, src)
    assert argvs(plan)[0] == "echo '[ a  b ]'"
    assert plan.dag.preds[2] == {1}


def test_loops_compile_to_the_same_dag_as_the_written_out_script(d: Path) -> None:
    # the compile benchmark's two forms, small: loop bodies are compiled once and replayed,
    # which must give exactly what the written-out script gives
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "script"))
    import bench_compile as bc

    saved = bc.FLOWS, bc.DAYS, bc.CHAIN
    bc.FLOWS, bc.DAYS, bc.CHAIN = 3, 25, 4
    try:
        for f in range(bc.FLOWS):
            (d / f"in_f{f}.nc").write_text("x")
        flat, loops = comp(d, bc.unrolled()), comp(d, bc.looped())
    finally:
        bc.FLOWS, bc.DAYS, bc.CHAIN = saved
    assert len(flat.steps) == 3 * 25 * 2 + 3 * 5 + 1
    assert argvs(flat) == argvs(loops)
    assert flat.dag.preds == loops.dag.preds
    assert [c.steps for c in flat.clusters] == [c.steps for c in loops.clusters]
    assert [g.path for g in flat.dag.scratch_groups()] == \
        [g.path for g in loops.dag.scratch_groups()]
