"""Run what bash would run: chains under bash with the script's shell options, failures and
`set -e` as bash has them (nothing after the first failure leaves a trace), bash's exit status.

Every test runs the script under bash and under `shoal script` on copies of the same inputs
and compares the files left, stdout and the exit status (``compare``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from script_helpers import MODELS, compare, make_models, needs_nco, write_model


def no_inputs(d: Path) -> None:
    (d / "in.txt").write_text("alpha\nbeta\n")


def both(tmp_path: Path, source: str, setup=no_inputs, extra: tuple[str, ...] = ()
         ) -> tuple[int, str]:
    rb, rs = compare(tmp_path, source, setup, extra=extra)
    assert rs.stdout == rb.stdout
    return rb.returncode, rb.stdout


# ---------------------------------------------------------------- bash, and its options


def test_echo_e_and_printf_v_run_as_bash_runs_them(tmp_path: Path) -> None:
    code, out = both(tmp_path, """set -e
echo -e "model\\tmean" > header.txt
echo -e "a\\tb" | cut -f2 > second.txt
printf -v line '%s' unused
echo -e "done\\tok"
""")
    assert code == 0 and out == "done\tok\n"


def test_pipefail_stops_set_e_at_a_failing_pipeline(tmp_path: Path) -> None:
    code, _ = both(tmp_path, """set -e -o pipefail
sort in.txt > sorted.txt
grep zzz in.txt | sort > none.txt
echo after > after.txt
""")
    assert code == 1  # grep's status; without pipefail sort's 0 would go on


def test_pipefail_without_set_e_gives_the_pipeline_status(tmp_path: Path) -> None:
    code, _ = both(tmp_path, "set -o pipefail\ngrep zzz in.txt | sort > none.txt\n")
    assert code == 1


def test_set_u_in_a_chain(tmp_path: Path) -> None:
    # the runner's own chain code must run under nounset; echo -e needs bash
    code, out = both(tmp_path, """set -eu
a=in.txt
sort -r "$a" > r.txt
echo -e "x\\ty" | cut -f1 > x.txt
cat r.txt x.txt | tr a-z A-Z > all.txt
echo "${a%.txt}"
""")
    assert code == 0 and out == "in\n"


# ---------------------------------------------------------------- set -e: nothing after


def test_set_e_stops_and_keeps_what_bash_keeps(tmp_path: Path) -> None:
    # bash stops at the failing grep: w.txt stays, the rm and the writes after never happen
    code, out = both(tmp_path, """set -e
cp in.txt w.txt
grep zzz w.txt > found.txt
rm w.txt
sort in.txt > late1.txt
echo late > late2.txt
echo printed
""")
    assert code == 1 and out == ""


def test_set_e_independent_later_commands_leave_no_trace(tmp_path: Path) -> None:
    code, out = both(tmp_path, """set -e
echo early
sort in.txt > a.txt
grep zzz in.txt > g.txt
sort -r in.txt > b.txt
tr a-z A-Z < in.txt > c.txt
cat in.txt in.txt > d.txt
echo late
""")
    assert code == 1 and out == "early\n"


def test_set_e_exceptions_do_not_stop(tmp_path: Path) -> None:
    code, out = both(tmp_path, """set -e
grep zzz in.txt > a.txt && echo never
grep -q zzz in.txt || echo alternative
! grep -q alpha in.txt
sort in.txt > b.txt
echo end
""")
    assert code == 0 and out == "alternative\nend\n"


# ---------------------------------------------------------------- without set -e


def test_without_set_e_every_command_runs(tmp_path: Path) -> None:
    # bash runs the readers of a failed command's output; they fail or not on their own
    code, _ = both(tmp_path, """cat in.txt nosuch.txt > b.txt
cat b.txt > c.txt
grep zzz c.txt > d.txt
sort d.txt > e.txt
echo fine > f.txt
""", setup=lambda d: (no_inputs(d), (d / "nosuch.txt").write_text("x")), extra=())
    assert code == 0


# ---------------------------------------------------------------- exit status


@pytest.mark.parametrize("source, expected", [
    ("set -e\necho a > a.txt\ngrep zzz in.txt && echo x\nsh -c 'exit 3'\necho b > b.txt\n", 3),
    ("sort -k nonsense in.txt > s.txt\necho a > a.txt\ngrep zzz in.txt\n", 1),
    ("sh -c 'exit 5'\necho a > a.txt\nsh -c 'exit 6'\n", 6),
    ("grep zzz in.txt > g.txt\necho a > a.txt\nexit 4\n", 4),
])
def test_exit_status_is_bash_s(tmp_path: Path, source: str, expected: int) -> None:
    code, _ = both(tmp_path, source)
    assert code == expected


# ---------------------------------------------------------------- NCO


@needs_nco
def test_set_e_nco_failure_keeps_the_work_file(tmp_path: Path) -> None:
    code, _ = both(tmp_path, """set -e
cp sresalb_ccma_cgcm3_1.nc w.nc
ncks -O -v nosuch w.nc out.nc
rm w.nc
ncks -O -v tas sresalb_ncar_ccsm3_0.nc b.nc
ncwa -O -a time sresalb_ncar_ccsm3_0.nc c.nc
""", setup=lambda d: make_models(d, 2))
    assert code != 0


@needs_nco
def test_set_e_nco_false_in_the_middle(tmp_path: Path) -> None:
    code, _ = both(tmp_path, """set -e
ncks -O -v tas sresalb_ccma_cgcm3_1.nc a.nc
ncwa -O -a lat,lon nosuch_or_not.nc x.nc
ncks -O -v tas sresalb_ncar_ccsm3_0.nc b.nc
ncra -O sresalb_ncar_ccsm3_0.nc c.nc
""", setup=lambda d: (make_models(d, 2), (d / "nosuch_or_not.nc").write_text("not netcdf")))
    assert code != 0


MODELS19 = MODELS + [f"model_{k:02d}" for k in range(len(MODELS), 19)]


def nineteen(d: Path) -> None:
    for k, m in enumerate(MODELS19):
        write_model(d / f"sresalb_{m}.nc", k, nt=24, nlat=2, nlon=3)


@needs_nco
def test_set_e_failure_in_the_middle_of_19_model_chain(tmp_path: Path) -> None:
    # the benchmark's ensemble workflow under set -e; the bias of the 10th model fails
    # (no such variable): bash stops there, with the anomalies of the models before it
    source = Path(__file__).resolve().parents[2] / "bench" / "script" / "ipcc_like.sh"
    text = source.read_text().replace("#!/bin/bash\n", "#!/bin/bash\nset -e\n", 1)
    text = text.replace("  ncwa -a time anm_${mdl}.nc bias_${mdl}.nc\n",
                        '  case $mdl in model_09) v=nosuch;; *) v=tas;; esac\n'
                        "  ncwa -a time -v $v anm_${mdl}.nc bias_${mdl}.nc\n", 1)
    assert "nosuch" in text and "set -e" in text
    code, _ = both(tmp_path, text, setup=nineteen)
    assert code != 0
    assert (tmp_path / "shoal" / "anm_model_08.nc").exists()
    assert not (tmp_path / "shoal" / "biases.nc").exists()


@pytest.mark.parametrize("fail_first", [False, True])
def test_set_e_with_an_unknown_program(tmp_path: Path, fail_first: bool) -> None:
    # the unknown program (a barrier) sees the files written before it under their names
    fail = "grep zzz in.txt > g.txt\n"
    code, out = both(tmp_path, "set -e\nsort in.txt > a.txt\n" + (fail if fail_first else "")
                     + "tr a-z A-Z < in.txt > u.txt\nsh -c 'cat a.txt u.txt > b.txt'\n"
                     "cat b.txt > c.txt\n" + ("" if fail_first else fail)
                     + "sort -r in.txt > late.txt\necho end\n")
    assert code == 1 and out == ""


@pytest.mark.parametrize("extra", [(), ("--local-threads",), ("--cluster", "swamp"),
                                   ("--cluster", "none", "--no-shm")])
def test_set_e_in_place_edits_and_removals_wait_for_earlier_commands(
        tmp_path: Path, extra: tuple[str, ...]) -> None:
    # appends, mv, rm and mkdir change what exists: they run only once all before succeeded
    code, out = both(tmp_path, """set -e
sort in.txt > a.txt
cp in.txt t.txt
echo one >> a.txt
sort -r t.txt > r.txt
mkdir -p out
cp r.txt out/r.txt
grep zzz r.txt > g.txt
echo two >> a.txt
mv t.txt moved.txt
rm in.txt
mkdir late
echo never
""", extra=extra)
    assert code == 1 and out == ""


@needs_nco
def test_set_e_failed_rewrite_keeps_the_previous_file(tmp_path: Path) -> None:
    # the second ncks fails before writing: bash keeps sel.nc from the first call
    code, _ = both(tmp_path, """set -e
process() {
  ncwa -O -a lat,lon "$1" gm.nc
  ncks -O -v "$2" gm.nc sel.nc
  echo "processed $2" >> done.txt
}
process sresalb_ccma_cgcm3_1.nc tas
process sresalb_ncar_ccsm3_0.nc nosuchvar
echo never >> done.txt
""", setup=lambda d: make_models(d, 2))
    assert code == 1


def test_set_e_skipped_rm_keeps_the_file(tmp_path: Path) -> None:
    code, out = both(tmp_path, """set -e
sort in.txt > tmp.txt
grep -q zzz in.txt && rm tmp.txt
sort -r in.txt > r.txt
echo done
""")
    assert code == 0 and out == "done\n"


def test_set_e_trees_links_and_overwrites_wait_for_earlier_commands(tmp_path: Path) -> None:
    def setup(d: Path) -> None:
        no_inputs(d)
        (d / "old.txt").write_text("from before\n")
        (d / "keep").mkdir()
        (d / "keep" / "k.txt").write_text("k\n")

    code, out = both(tmp_path, """set -e
mkdir -p d1
sort in.txt > d1/a.txt
sort -r in.txt > old.txt
cp -r d1 d2
ln -s d1/a.txt link.txt
grep zzz in.txt > g.txt
rm -rf keep
cp -r d2 d3
sort in.txt > old.txt
echo never
""", setup=setup)
    assert code == 1 and out == ""


@pytest.mark.parametrize("extra", [(), ("--local-threads", "--no-shm")])
def test_skipped_rm_of_an_intermediate_keeps_it(tmp_path: Path, extra: tuple[str, ...]) -> None:
    # without set -e: `grep && rm` does not remove tmp.txt when grep fails, as in bash
    code, out = both(tmp_path, """sort in.txt > tmp.txt
sort -r tmp.txt > r.txt
grep -q zzz in.txt && rm tmp.txt
sort in.txt > tmp2.txt
cat tmp2.txt > s.txt
grep -q alpha in.txt && rm tmp2.txt
echo done
""", extra=extra)
    assert code == 0 and out == "done\n"
