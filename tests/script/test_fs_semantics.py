"""Directories, symbolic links, NCO's refusal to overwrite, appends to new files and files an
unknown program may have made: each compiled (the edges that make it right) and run under bash
and under `shoal script` with the same files and exit status (issue 9, classes 4, 5 and 8)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from script_helpers import compare, make_models, needs_nco

from shoal.script.compiler import CompileOptions, Plan, compile_source
from shoal.script.model import INOUT, OUT

pytestmark = needs_nco

A, B = "sresalb_ccma_cgcm3_1.nc", "sresalb_ncar_ccsm3_0.nc"


def comp(d: Path, src: str) -> Plan:
    return compile_source(src.encode(), "t.sh", [], CompileOptions(cwd=str(d)))


def step_of(plan: Plan, text: str) -> int:
    """The id of the one step whose command line contains ``text``."""
    found = [s.id for s in plan.steps if text in s.describe()]
    assert len(found) == 1, (text, [s.describe() for s in plan.steps])
    return found[0]


def after(plan: Plan, later: str, earlier: str) -> bool:
    """True when the step of ``later`` (transitively) waits for the step of ``earlier``."""
    target, todo, seen = step_of(plan, earlier), [step_of(plan, later)], set()
    while todo:
        v = todo.pop()
        for q in plan.dag.preds[v]:
            if q == target:
                return True
            if q not in seen:
                seen.add(q)
                todo.append(q)
    return False


@pytest.fixture
def no_terminal() -> Iterator[None]:
    """stdin of bash and shoal (and so of NCO) is /dev/null, never a terminal NCO would ask."""
    saved = os.dup(0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    try:
        yield
    finally:
        os.dup2(saved, 0)
        os.close(saved)
        os.close(null)


def models(d: Path) -> None:
    make_models(d, 2, nt=12)


# ------------------------------------------------------------------------------- directories
DIRS = f"""#!/bin/bash
mkdir -p work/sub
cp {A} work/
ncwa -O -a lat work/{A} work/sub/mean.nc
rm -rf old
mkdir old
echo fresh > old/a.txt
cat old/a.txt > old_copy.txt
mkdir out
ncks -O -v tas {B} out/x.nc
echo alpha > tmp_a.txt
mkdir -p keep
mv tmp_a.txt keep/
"""


def test_directories_are_ordered_with_every_use_below_them(tmp_path: Path) -> None:
    c = tmp_path / "c"
    c.mkdir()
    models(c)
    (c / "old").mkdir()
    (c / "old" / "stale.txt").write_text("stale\n")
    plan = comp(c, DIRS)
    assert after(plan, f"cp {A} work/", "mkdir -p work/sub")  # cp into the parent mkdir made
    assert after(plan, "ncwa", "mkdir -p work/sub") and after(plan, "ncwa", f"cp {A}")
    assert after(plan, "mkdir old", "rm -rf old")              # not before the old one goes
    assert after(plan, "echo fresh", "mkdir old")
    assert after(plan, "ncks", "mkdir out")
    # into a directory the new name is made from the source's: the source keeps its real name
    assert after(plan, "mv tmp_a.txt keep/", "mkdir -p keep")
    assert not [g for g in plan.dag.scratch_groups() if g.path.endswith("tmp_a.txt")]

    def setup(d: Path) -> None:
        models(d)
        (d / "old").mkdir()
        (d / "old" / "stale.txt").write_text("stale\n")
    compare(tmp_path, DIRS, setup)


MOVE_COPY = f"""#!/bin/bash
mkdir -p in/sub
cp sresalb_*.nc in/sub/
echo note > in/readme.txt
mv in staged
for f in staged/sub/*.nc; do
  ncwa -O -a lat "$f" "${{f%.nc}}_avg.nc"
done
cat staged/readme.txt > readme_copy.txt
cp -r staged backup
echo changed >> staged/readme.txt
ncks -O -v tas staged/sub/{A} staged/sub/later.nc
for f in backup/sub/*; do echo "$f" >> listing.txt; done
cat backup/readme.txt > backup_readme.txt
mkdir archive
mv backup archive/
ncks -O archive/backup/sub/{B} from_archive.nc
"""


def test_copy_and_move_of_directories_are_modelled(tmp_path: Path) -> None:
    c = tmp_path / "c"
    c.mkdir()
    models(c)
    plan = comp(c, MOVE_COPY)
    # files below the moved directory appear below the new name (globs see them, no refusal)
    avg = [s for s in plan.steps if "ncwa" in s.programs]
    assert [s.describe().split()[-1] for s in avg] == [
        f"staged/sub/{A[:-3]}_avg.nc", f"staged/sub/{B[:-3]}_avg.nc"]
    for s in avg:
        assert after(plan, s.describe(), "mv in staged")
    assert after(plan, "cat staged/readme.txt", "mv in staged")
    cp_r = step_of(plan, "cp -r staged backup")
    assert after(plan, "cp -r staged backup", avg[1].describe())   # copies what was written
    assert after(plan, "echo changed", "cp -r staged backup")       # not what is written after
    assert after(plan, "ncks -O -v tas staged", "cp -r staged backup")
    assert after(plan, "mv backup archive/", "cat backup/readme.txt")
    assert after(plan, "ncks -O archive/backup", "mv backup archive/")
    # files below a copied or moved tree keep their real names there
    scratch = {g.path for g in plan.dag.scratch_groups()}
    assert not any("/staged/" in p or "/backup/" in p for p in scratch)
    assert not plan.dag.steps[cp_r].barrier
    compare(tmp_path, MOVE_COPY, models)


# ------------------------------------------------------------------------------- symlinks
LINKS = f"""#!/bin/bash
cp {A} a.nc
ln -s a.nc b.nc
ncatted -O -a note,global,o,c,"edited through the link" b.nc
ncks -O -v tas a.nc out1.nc
echo one > t.txt
ln -s t.txt u.txt
echo two >> u.txt
cat t.txt > t_copy.txt
ln -s later.txt dangling.txt
echo made > dangling.txt
cat later.txt > later_copy.txt
mkdir real
ln -s real lk
echo inside > lk/f.txt
cat real/f.txt > f_copy.txt
cat start_link.txt > start_copy.txt
echo appended >> start_target.txt
cat start_link.txt > start_copy2.txt
"""


def _link_setup(d: Path) -> None:
    models(d)
    (d / "start_target.txt").write_text("at start\n")
    (d / "start_link.txt").symlink_to("start_target.txt")


def test_a_file_and_a_link_to_it_are_one_file(tmp_path: Path) -> None:
    c = tmp_path / "c"
    c.mkdir()
    _link_setup(c)
    plan = comp(c, LINKS)
    assert after(plan, "ncks -O -v tas a.nc", "ncatted")   # reads what was edited via b.nc
    assert after(plan, "echo two", "ln -s t.txt u.txt")
    assert after(plan, "cat t.txt", "echo two")
    assert after(plan, "echo made", "ln -s later.txt")
    assert after(plan, "cat later.txt", "echo made")
    assert after(plan, "echo inside", "ln -s real lk") and after(plan, "echo inside", "mkdir real")
    assert after(plan, "cat real/f.txt", "echo inside")
    assert after(plan, "start_copy2", "echo appended")       # a link present at start
    assert after(plan, "echo appended", "start_copy.txt")
    rb, rs = compare(tmp_path, LINKS, _link_setup)
    for name in ("b.nc", "u.txt", "dangling.txt", "lk", "start_link.txt"):
        assert (tmp_path / "shoal" / name).is_symlink() == (tmp_path / "bash" / name).is_symlink()


# ------------------------------------------------------------------------------- NCO no-clobber
NOCLOBBER = f"""#!/bin/bash
ncwa -O -a lat {A} t.nc
ncks -O t.nc first.nc
ncks -O -v tas {B} existing_copy.nc
ncwa -a lon {A} t.nc
"""
NOCLOBBER_AT_START = f"""#!/bin/bash
ncks -O -v tas {B} other.nc
ncra {A} existing.nc
"""


@pytest.mark.parametrize("src", [NOCLOBBER, NOCLOBBER_AT_START])
def test_nco_without_overwrite_fails_on_an_existing_output(
        tmp_path: Path, src: str, no_terminal: None) -> None:
    c = tmp_path / "c"
    c.mkdir()
    models(c)
    (c / "existing.nc").write_bytes((c / B).read_bytes())
    plan = comp(c, src)
    last = plan.steps[-1]
    out = [u for u in last.uses if u.path.endswith(("/t.nc", "/existing.nc"))]
    assert [u.role for u in out] == [INOUT] and out[0].loc is None  # its real name, in place
    if src is NOCLOBBER:
        assert after(plan, "ncwa -a lon", "ncks -O t.nc first.nc")  # after every earlier use
        assert after(plan, "ncwa -a lon", "ncwa -O -a lat")
    assert plan.dag.groups[plan.dag.versions[-1].group].real

    def setup(d: Path) -> None:
        models(d)
        (d / "existing.nc").write_bytes((d / B).read_bytes())
    rb, rs = compare(tmp_path, src, setup)
    assert rb.returncode == 1  # NCO's own refusal; the file is what it was (compared)
    assert "exists" in rs.stdout + rs.stderr


# ------------------------------------------------------------------------------- appends
APPENDS = f"""#!/bin/bash
ncks -A -v tas {A} new.nc
ncks -A -v lat {B} new.nc
echo first | tee -a log.txt
echo second >> log.txt
ncks -O new.nc copy.nc
"""


def test_appends_to_a_file_that_does_not_exist_create_it(tmp_path: Path) -> None:
    c = tmp_path / "c"
    c.mkdir()
    models(c)
    plan = comp(c, APPENDS)
    first = [u for u in plan.steps[0].uses if u.path.endswith("/new.nc")]
    assert [u.role for u in first] == [OUT]
    tee = [u for u in plan.steps[2].uses if u.path.endswith("/log.txt")]
    assert [u.role for u in tee] == [OUT]
    assert plan.dag.preds[1] == {0} and plan.dag.preds[3] == {2}
    compare(tmp_path, APPENDS, models)


# ------------------------------------------------------------------------------- unknown programs
UNKNOWN = """#!/bin/bash
./make_files.sh
cat made.txt > made_copy.txt
echo more >> made.txt
ncks -O -v tas made_dir/m.nc from_unknown.nc
echo replaced > scratch.txt
cat scratch.txt > scratch_copy.txt
rm scratch.txt
"""


def _unknown_setup(d: Path) -> None:
    models(d)
    tool = d / "make_files.sh"
    tool.write_text(f"#!/bin/sh\necho made > made.txt\nmkdir -p made_dir\ncp {A} made_dir/m.nc\n"
                    "echo by the tool > scratch.txt\n")
    tool.chmod(0o755)


def test_files_an_unknown_program_may_have_made_keep_their_real_names(tmp_path: Path) -> None:
    c = tmp_path / "c"
    c.mkdir()
    _unknown_setup(c)
    plan = comp(c, UNKNOWN)
    assert plan.steps[0].barrier
    for s in plan.steps[1:]:
        assert 0 in plan.dag.preds[s.id]
    # read and appended where the barrier left them, not in scratch
    assert not {g.path.rsplit("/", 1)[1] for g in plan.dag.scratch_groups()} & {
        "made.txt", "m.nc", "scratch.txt"}
    compare(tmp_path, UNKNOWN, _unknown_setup)


# ------------------------------------------------------------------------------- removal
def test_a_removed_file_present_at_start_is_removed(tmp_path: Path) -> None:
    # tmp.nc exists at start: its new versions may go to scratch, but `rm tmp.nc` must still
    # remove the real file (it was left behind, holding the start version)
    src = f"ncwa -O -a lat {A} tmp.nc\nncks -O tmp.nc out.nc\nrm tmp.nc\n"

    def setup(d: Path) -> None:
        models(d)
        (d / "tmp.nc").write_bytes((d / B).read_bytes())
    c = tmp_path / "c"
    c.mkdir()
    setup(c)
    plan = comp(c, src)
    assert 2 not in plan.dag.noop
    compare(tmp_path, src, setup)


def test_a_read_after_a_removal_waits_for_it(tmp_path: Path) -> None:
    # bash reads nothing there (the program's own error, its status): the reader must run
    # after the rm/mv, never race it (a file made by the script, one present at start, one
    # moved away)
    src = ("cp obs.txt work.txt\nsort work.txt > sorted.txt\nrm work.txt\n"
           "cat work.txt > copy.txt\nrm -f params.txt\ngrep -q region params.txt\n"
           "mv moved.txt away.txt\nwc -l moved.txt > count.txt\ntrue\n")

    def setup(d: Path) -> None:
        (d / "obs.txt").write_text("b\na\n")
        (d / "params.txt").write_text("region x\n")
        (d / "moved.txt").write_text("one\n")
    c = tmp_path / "c"
    c.mkdir()
    setup(c)
    plan = comp(c, src)
    assert after(plan, "cat work.txt", "rm work.txt")
    assert after(plan, "grep -q region params.txt", "rm -f params.txt")
    assert after(plan, "wc -l moved.txt", "mv moved.txt away.txt")
    compare(tmp_path, src, setup)


def test_a_write_into_a_missing_directory_fails_each_time(tmp_path: Path) -> None:
    # sub/ never exists: both writes fail in bash; a scratch name must not make the first work
    src = f"for a in x y; do\n  ncks -O -v tas {A} sub/o.nc\ndone\necho end > end.txt\n"
    c = tmp_path / "c"
    c.mkdir()
    models(c)
    plan = comp(c, src)
    outs = [u for s in plan.steps[:2] for u in s.uses if u.path.endswith("/sub/o.nc")]
    assert len(outs) == 2 and all(u.loc is None for u in outs)  # real names
    assert not plan.dag.scratch_groups()
    rb, rs = compare(tmp_path, src, models)
    assert (rb.stdout + rb.stderr).count("unable to create") == 2
    assert (rs.stdout + rs.stderr).count("unable to create") == 2


def test_a_file_read_and_written_by_one_command_is_one_file(tmp_path: Path) -> None:
    # bash truncates the output before the command reads it: both names are the same file
    src = ("echo hello > o1.txt\ntee o1.txt < o1.txt > /dev/null\n"
           "printf 'b\\na\\n' > s.txt\nsort s.txt > s.txt\necho end > end.txt\n"
           # onto itself: "are the same file", nothing changes, the script goes on
           "cp end.txt end.txt || echo cp failed > cp_status.txt\n"
           "mv end.txt ./end.txt || echo mv failed > mv_status.txt\n"
           "cat end.txt > end_copy.txt\n")
    c = tmp_path / "c"
    c.mkdir()
    plan = comp(c, src)
    tee = [u for u in plan.steps[1].uses if u.path.endswith("/o1.txt")]
    assert sorted(u.role for u in tee) == ["in", "inout"]
    assert not plan.dag.scratch_groups()
    mv = plan.steps[step_of(plan, "mv end.txt")]
    assert not [u for u in mv.uses if u.role == "del"]
    compare(tmp_path, src, lambda d: None)
    assert (tmp_path / "shoal" / "o1.txt").read_text() == ""
    assert (tmp_path / "shoal" / "mv_status.txt").exists()


def test_programs_that_print_file_names_read_them_by_their_names(tmp_path: Path) -> None:
    # an intermediate read by wc / ncdump / ncks -m: its (scratch) name would be printed
    src = (f"echo a > t.txt\nwc -l t.txt > n.txt\nrm t.txt\n"
           f"ncks -O -v tas {A} small.nc\nncdump -h small.nc | head -n 1 > small.cdl\n"
           "ncks -m small.nc | head -n 1 > small_meta.txt\nrm small.nc\n")
    c = tmp_path / "c"
    c.mkdir()
    models(c)
    plan = comp(c, src)
    assert not plan.dag.scratch_groups()
    rb, rs = compare(tmp_path, src, models)
    assert (tmp_path / "shoal" / "n.txt").read_text() == "1 t.txt\n"
    assert (tmp_path / "shoal" / "small.cdl").read_text().startswith("netcdf small {")
