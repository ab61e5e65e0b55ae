"""The NCO option tables of commands.toml, checked against every installed NCO operator.

A wrong table is silently wrong output: an option taken to have a value swallows the next word
(``ncwa -b a.nc out.nc`` loses the input a.nc, so its writer and this reader race), an option
taken as a flag turns its value into a file. Each operator's own ``--help`` lists its options
and shows which take an argument; the operator itself is the judge where the help is wrong: an
option is run alone (``ncks -s``) and getopt says ``requires an argument``, or not, or that it
does not know it. The tables are loaded through ``shoal.script.semantics`` and an option is
parsed by the compiler's own parser, exactly as a command line of a script is.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from script_helpers import compare, make_models, needs_nco

from shoal.script.compiler import CompileOptions, Plan, compile_source
from shoal.script.model import IN, Step
from shoal.script.semantics import Semantics, Spec, _parse_shape

pytestmark = needs_nco

_HEADER = "Command line options cheatsheet"


def nco_operators() -> list[str]:
    """Every NCO operator installed beside ncks: the programs whose --help is NCO's."""
    ncks = shutil.which("ncks")
    if ncks is None:
        return []
    found = []
    for p in sorted(Path(ncks).parent.glob("nc*")):
        if not os.access(p, os.X_OK) or p.is_dir():
            continue
        head = subprocess.run([str(p), "--help"], capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL, env=_C_ENV).stdout[:200]
        if head.startswith(f"{p.name} {_HEADER}"):
            found.append(p.name)
    return found


_C_ENV = {**os.environ, "LC_ALL": "C", "LANG": "C", "LANGUAGE": ""}
OPERATORS = nco_operators()

# --help lines: "-b, --rdd, retain-degenerate-dimensions\tRetain ...",
# "-v, --variable var1[,var2[...]] Variable(s) ...", "    --cnk_byt, chunk_byte sz_byt\tChunk...":
# names separated by commas (bare words are more long names), then the argument, if any
_NAME = r"-{0,2}[A-Za-z0-9][A-Za-z0-9_-]*"
_NAMES = re.compile(rf"({_NAME}(?:,\s*{_NAME})*)(.*)$")


def parse_help(text: str) -> tuple[dict[str, bool], set[str]]:
    """Options of a --help text: {option: the help shows an argument} from the option list, and
    the names of the synopsis line (``[-b fl_bnr] [--bfr byt]``), whose arguments are not
    compared (the synopsis is shorter than the list and often drops them)."""
    listed: dict[str, bool] = {}
    lines = text.splitlines()
    for line in lines:
        if not (re.match(r"-[A-Za-z0-9], --", line) or re.match(r"\s+--", line)):
            continue
        head, _tab, _desc = line.strip().partition("\t")
        m = _NAMES.match(head)
        assert m, line
        names = [n.strip() for n in m.group(1).split(",")]
        rest = m.group(2)
        if rest.startswith("..."):
            rest = rest[3:]  # "--prw, per_recor...": a name cut short (getopt takes prefixes)
        if rest.startswith("|"):
            # "--dbl, flt, rth_dbl|flt": rth_dbl and rth_flt, flags
            names.append(names[-1].rsplit("_", 1)[0] + "_" + rest[1:].split()[0])
            rest = ""
        # the argument: "=wgt", or a word before the tab; with no tab the description follows
        # the argument after a space ("-d, --dmn, dimension dim,[min]... Dimension's limits")
        shows_arg = rest.startswith("=") or bool(rest.strip())
        for n in names:
            opt = n if n.startswith("-") else "--" + n
            listed[opt] = shows_arg
    synopsis = set(re.findall(rf"\[({_NAME})", lines[1] if len(lines) > 1 else ""))
    return listed, {s for s in synopsis if s.startswith("-")}


def probe(program: str, opt: str, cwd: Path) -> str:
    """What ``program`` itself makes of ``opt`` given last on its command line: "value" (getopt
    says it requires an argument), "unknown", "ambiguous" or "flag"."""
    r = subprocess.run([program, opt], capture_output=True, text=True, timeout=120, cwd=cwd,
                       stdin=subprocess.DEVNULL, env=_C_ENV)
    err = r.stderr + r.stdout
    # glibc's getopt messages (NCO adds its own "Missing or unrecognized option." after them)
    if "requires an argument" in err:
        return "value"
    if "is ambiguous" in err:
        return "ambiguous"
    if "unrecognized option '" in err or "invalid option -- " in err:
        return "unknown"
    return "flag"


def table_kind(spec: Spec, opt: str) -> str:
    """What the compiler makes of ``opt``: "value" if its parser takes the next word as the
    option's value, else "flag" if the table knows the option, else "unknown"."""
    opts = _parse_shape(spec, (opt, ""))[0]
    if any(v == 1 for _o, v, _i, _p in opts):
        return "value"
    known = spec.long_option(opt) if opt.startswith("--") else \
        opt if spec.has("flags", opt) or spec.has("with_value", opt) else None
    return "flag" if known else "unknown"


# Where an operator's --help says something the operator does not do: (operators, or None for
# every operator whose help lists the option; options; what the help shows; what NCO 5.1.4
# does; why, with the manual, http://nco.sf.net/nco.html, also /usr/share/doc/nco/nco.html).
# The table follows the operator, never the help.
_RA = ("ncra", "ncrcat", "nces", "ncea")  # one binary
_HELP_ERRATA: list[tuple[tuple[str, ...] | None, tuple[str, ...], str, str, str]] = [
    # -- the help shows no argument; the operator requires one
    (None, ("-o", "--output", "--fl_out"), "flag", "value",
     "the cheatsheet prints '-o, --output, fl_out' with no argument name; manual 3.7 "
     "Specifying Output Files: '-o fl_out', '--fl_out', '--output'"),
    (("ncbo", "ncdiff"), ("--output", "--fl_out"), "flag", "unknown",
     "ncbo's getopt table has no --output/--fl_out (only -o), though manual 3.7 lists them "
     "for all operators"),
    (None, ("--hdr_pad", "--header_pad"), "flag", "value",
     "manual 3.2 Metadata Optimization: '--hdr_pad=hdr_pad' bytes of padding"),
    (("ncks",), ("--dt_fmt", "--date_format"), "flag", "value",
     "manual 4.9 ncks: '--dt_fmt=dt_fmt', an integer 0-3"),
    (("ncks",), ("--data", "--prn", "--print"), "flag", "value",
     "listed as long names of the flags -H and -P, but 5.1.4 declares them with a required "
     "argument: 'ncks --data in.nc' takes in.nc as the value (manual 4.9 ncks names only -H, "
     "-P)"),
    (_RA, ("--cb", "--clm_bnd"), "flag", "value",
     "manual 3.27 Climatology and Bounds Support: '--cb=yr_srt,yr_end,mth_srt,mth_end,tpd'"),
    (("nces", "ncea"), ("--nsm_sfx", "--ensemble_suffix"), "flag", "value",
     "manual 4.6 nces: '--nsm_sfx=sfx' names the output group"),
    (("ncecat",), ("-u", "--ulm_nm", "--rcd_nm"), "flag", "value",
     "manual 4.5 ncecat: '-u ulm_nm' (or '--ulm_nm', 'rcd_nm') names the record dimension"),
    (("ncrename",), ("-g", "--grp", "--group"), "flag", "value",
     "manual 4.13 ncrename: '-g old_name,new_name' group renaming"),
    # -- the help lists an option the operator does not have (the command fails)
    (None, ("--pth",), "value", "unknown",
     "5.1.4 has only --path for -p, though manual 3.4 also names '--pth'"),
    (None, ("--debug-level",), "value", "unknown",
     "5.1.4 has --dbg_lvl, --debug and --nco_dbg_lvl for -D, though manual 3.1 names "
     "'--debug-level'"),
    (None, ("--apn",), "flag", "unknown",
     "only ncks has --apn; the others only --append (manual 3.42 Batch Mode lists both)"),
    (None, ("--classic", "--netcdf4_classic"), "flag", "unknown",
     "help '-3, --3, classic' and '-7, --7, netcdf4_classic': these are values of --fl_fmt "
     "(manual 3.9 File Formats and Conversion), not options"),
    (None, ("--6", "--64"), "flag", "ambiguous",
     "help '-6, --6, 64, 64bit_offset': no such options, only abbreviations of both "
     "--64bit_data and --64bit_offset, which getopt rejects as ambiguous"),
    (("ncks",), ("--mtd",), "flag", "ambiguous",
     "help '-m, --mtd, metadata': 5.1.4 has --mtd_lcl and --mtd_glb, so --mtd is ambiguous"),
    (("ncks",), ("--var_val",), "flag", "unknown",
     "5.1.4 spells it --val_var (manual 4.9 ncks: '--val_var')"),
    (("ncbo", "ncdiff"), ("-n", "--nintap"), "value", "unknown",
     "ncbo takes exactly two input files: no NINTAP in its getopt table"),
    (("ncwa",) + _RA, ("--gpe", "--grp"), "value", "unknown",
     "-G and -g exist, their long names do not in ncwa's and ncra's getopt tables"),
    (("ncwa",) + _RA, ("--union", "--unn"), "flag", "unknown",
     "not in ncwa's and ncra's getopt tables, though manual 3.15 lists --unn for them"),
    (("ncatted", "ncrename"), ("--hpss", "--hpss_try"), "flag", "unknown",
     "not in ncatted's and ncrename's getopt tables"),
    (("ncrename",), ("-R", "--retain", "--rtn"), "flag", "unknown",
     "not in ncrename's getopt tables (it reads no remote files)"),
    (("ncatted",), ("--revision",), "flag", "unknown", "ncatted has -r, --version, --vrs"),
    (("ncap2",), ("--fortran",), "flag", "unknown", "ncap2 has --ftn only"),
    (("ncap2",), ("--threads", "--omp_num_threads"), "value", "unknown",
     "ncap2 has --thr_nbr only"),
    (("ncra", "nces", "ncea"), ("--wgt_var",), "value", "unknown",
     "ncra's weight option is -w, --wgt, --weight"),
    (("nces", "ncea"), ("--ensemble_file", "--ensemble_group"), "flag", "unknown",
     "5.1.4 has --nsm_fl and --nsm_grp only (manual 4.6 nces names both spellings)"),
    (("ncpdq",), ("-X",), "value", "unknown", "not in ncpdq's getopt string"),
]


@pytest.fixture(scope="module")
def sem() -> Semantics:
    return Semantics()


@pytest.fixture(scope="module")
def helps() -> dict[str, tuple[dict[str, bool], set[str]]]:
    out = {}
    for p in OPERATORS:
        text = subprocess.run([p, "--help"], capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL, env=_C_ENV).stdout
        out[p] = parse_help(text)
    return out


@pytest.fixture(scope="module")
def probes(tmp_path_factory: pytest.TempPathFactory, sem: Semantics,
           helps: dict[str, tuple[dict[str, bool], set[str]]]) -> dict[tuple[str, str], str]:
    """The operator's verdict on every option its help lists and every option its table names
    (operators that are links to one binary are asked once)."""
    cwd = tmp_path_factory.mktemp("probe")
    names: dict[str, set[str]] = {}
    binary = {p: os.path.realpath(shutil.which(p) or p) for p in OPERATORS}
    wanted: dict[tuple[str, str], str] = {}  # (binary, option) -> a program name to run
    for p in OPERATORS:
        spec = sem.get(p)
        names[p] = set(helps[p][0]) | helps[p][1] | (table_names(spec) if spec else set())
        for o in names[p]:
            wanted.setdefault((binary[p], o), p)
    with ThreadPoolExecutor(4) as ex:
        verdicts = dict(zip(wanted, ex.map(lambda k: probe(wanted[k], k[1], cwd), wanted),
                            strict=True))
    return {(p, o): verdicts[(binary[p], o)] for p in OPERATORS for o in names[p]}


def table_names(spec: Spec) -> set[str]:
    return {o for k, v in spec.lists.items() if k != "aliases" for o in v}


def test_every_installed_operator_has_a_table(sem: Semantics) -> None:
    assert len(OPERATORS) >= 10, OPERATORS  # ncks, ncwa, ncra, ... all ship together
    missing = [p for p in OPERATORS if sem.get(p) is None]
    assert not missing, f"NCO operators without an entry in commands.toml: {missing}"


@pytest.mark.parametrize("program", OPERATORS)
def test_table_agrees_with_the_operator_on_every_option_its_help_lists(
        program: str, sem: Semantics, helps: dict[str, tuple[dict[str, bool], set[str]]],
        probes: dict[tuple[str, str], str]) -> None:
    spec = sem.get(program)
    assert spec is not None
    listed, synopsis = helps[program]
    wrong = []
    for opt in sorted(set(listed) | synopsis):
        truth = probes[(program, opt)]
        if truth == "ambiguous":
            continue  # the operator stops with an error, in bash too: no file use to get right
        mine = table_kind(spec, opt)
        if mine != truth:
            wrong.append(f"{opt}: {program} says {truth}, the table {mine}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("program", OPERATORS)
def test_table_names_only_real_options(program: str, sem: Semantics,
                                       probes: dict[tuple[str, str], str]) -> None:
    """Every option the table names (values, flags, file roles) is an option of the operator,
    with or without a value as the table says."""
    spec = sem.get(program)
    assert spec is not None
    wrong = [f"{o}: {program} says {probes[(program, o)]}, the table {table_kind(spec, o)}"
             for o in sorted(table_names(spec))
             if probes[(program, o)] != table_kind(spec, o)]
    assert not wrong, "\n".join(wrong)
    # a file role (-o, -S, -p, ...) names an option the table lists with its value or flags
    unlisted = sorted(o for o in table_names(spec) if table_kind(spec, o) == "unknown")
    assert not unlisted, f"options with a role but neither a value nor a flag: {unlisted}"


def test_help_is_wrong_only_where_documented(
        helps: dict[str, tuple[dict[str, bool], set[str]]],
        probes: dict[tuple[str, str], str]) -> None:
    """The help's own claims (argument shown or not, option exists) against the operator: the
    differences are exactly the documented errata, so a new NCO's help is looked at again."""
    found = {}
    for p in OPERATORS:
        for opt, shows_arg in helps[p][0].items():
            claim = "value" if shows_arg else "flag"
            if probes[(p, opt)] != claim:
                found[(p, opt)] = (claim, probes[(p, opt)])
    documented: dict[tuple[str, str], tuple[str, str]] = {}
    # an entry for some operators beats one for every operator
    for programs, options, claim, truth, _why in sorted(_HELP_ERRATA, key=lambda e: not e[0]):
        for p in programs or OPERATORS:
            for o in options:
                if programs or (p, o) in found:
                    documented.setdefault((p, o), (claim, truth))
    documented = {k: v for k, v in documented.items() if k[0] in OPERATORS}
    wrong = [f"{k}: help {v[0]}, operator {v[1]}; documented: {documented.get(k)}"
             for k, v in sorted(found.items()) if documented.get(k) != v]
    stale = sorted(set(documented) - set(found))
    assert not wrong, "undocumented differences between --help and the operator:\n" + \
        "\n".join(wrong)
    assert not stale, f"errata no operator's help needs any more: {stale}"


# gdb stops the operator at its getopt_long call and prints the option tables it passes: the
# short-option string and every struct option {name, has_arg, flag, val} up to the empty one
_GDB_DUMP = r'''
import gdb, struct
gdb.execute("set pagination off")
gdb.execute("break getopt_long")
gdb.execute("run </dev/null >/dev/null 2>&1")
inf = gdb.selected_inferior()
print("SHORT", gdb.parse_and_eval("(char*)$rdx").string())
base = int(gdb.parse_and_eval("(long)$rcx"))
i = 0
while True:
    name, has_arg, _p, _flag, _val, _q = struct.unpack("<QiiQii", bytes(inf.read_memory(base + 32 * i, 32)))
    if name == 0:
        break
    print("LONG", gdb.parse_and_eval(f"(char*){name}").string(), has_arg)
    i += 1
gdb.execute("kill")
'''


def getopt_tables(program: str, tmp: Path) -> tuple[dict[str, str], str]:
    """{option: "value" | "flag"} of every short and long option ``program`` passes to
    getopt_long, read from the running binary with gdb; or ({}, why) if gdb cannot."""
    script = tmp / "dump.py"
    script.write_text(_GDB_DUMP)
    r = subprocess.run(["gdb", "-q", "-batch", "-x", str(script), "--args",
                        shutil.which(program) or program], capture_output=True, text=True,
                       timeout=120, cwd=tmp, stdin=subprocess.DEVNULL, env=_C_ENV)
    opts: dict[str, str] = {}
    for line in r.stdout.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "SHORT":
            for k, c in enumerate(rest):
                if c != ":" and c != "-":
                    opts["-" + c] = "value" if rest[k + 1:k + 2] == ":" else "flag"
        elif kind == "LONG":
            name, has_arg = rest.rsplit(" ", 1)
            # has_arg 2 (optional) would need optional_value: NCO 5.1.4 has none
            opts["--" + name] = {"0": "flag", "1": "value"}.get(has_arg, "optional")
    return opts, "" if opts else (r.stdout + r.stderr)[-500:]


@pytest.mark.skipif(shutil.which("gdb") is None or os.uname().machine != "x86_64",
                    reason="reads the x86-64 getopt_long arguments with gdb")
def test_table_has_every_option_of_the_binary(sem: Semantics, tmp_path: Path) -> None:
    """The help does not list every option (aliases, hidden ones: ncks --data, ncwa --nintap);
    the binary's own getopt tables do. The table must have each, value or not as there."""
    done: set[str] = set()
    for program in OPERATORS:
        binary = os.path.realpath(shutil.which(program) or program)
        if binary in done:
            continue
        done.add(binary)
        opts, why = getopt_tables(program, tmp_path)
        if not opts and "ptrace" in why:
            pytest.skip(f"gdb cannot trace here: {why}")
        assert len(opts) > 40, why
        spec = sem.get(program)
        assert spec is not None
        wrong = [f"{o}: {program} says {k}, the table {table_kind(spec, o)}"
                 for o, k in sorted(opts.items()) if table_kind(spec, o) != k]
        assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("program", ["ncdump", "ncgen", "nccopy"])
def test_netcdf_bin_short_options(program: str, sem: Semantics, tmp_path: Path) -> None:
    """netcdf-bin's programs have short options only (getopt) and no useful --help: every
    letter and digit is given alone; the table takes a value exactly where the program does."""
    if shutil.which(program) is None:
        pytest.skip(f"{program} not installed")
    spec = sem.get(program)
    assert spec is not None
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)] + \
        [chr(c) for c in range(ord("A"), ord("Z") + 1)] + list("0123456789")
    with ThreadPoolExecutor(4) as ex:
        truth = dict(zip(letters, ex.map(lambda c: probe(program, "-" + c, tmp_path), letters),
                         strict=True))
    assert sum(v == "value" for v in truth.values()) >= 5, truth
    wrong = [f"-{c}: {program} says {v}, the table {table_kind(spec, '-' + c)}"
             for c, v in truth.items()
             if (v == "value") != (table_kind(spec, "-" + c) == "value")]
    assert not wrong, "\n".join(wrong)


# ---------------------------------------------------------------- through the compiler


def comp(d: Path, src: str) -> Plan:
    return compile_source(src.encode(), "t.sh", [], CompileOptions(cwd=str(d)))


def files(d: Path, step: Step) -> tuple[set[str], set[str]]:
    """(read, written) names of ``step``, relative to ``d`` (written: any role but reading)."""
    return ({os.path.relpath(u.path, d) for u in step.uses if u.role == IN},
            {os.path.relpath(u.path, d) for u in step.uses if u.role != IN})


@pytest.fixture
def d(tmp_path: Path) -> Path:
    for n in ("in.nc", "a.nc", "b.nc", "prog.nco", "m.cdl"):
        (tmp_path / n).write_text("x")
    return tmp_path


@pytest.mark.parametrize("line, reads, writes", [
    # flags the old table took for options with a value (the next file was swallowed)
    ("ncwa -b -a lat in.nc out.nc", {"in.nc"}, {"out.nc"}),
    ("ncwa --rdd -a lat in.nc out.nc", {"in.nc"}, {"out.nc"}),
    ("ncecat -M a.nc b.nc out.nc", {"a.nc", "b.nc"}, {"out.nc"}),
    ("ncap2 -v -s 'x=1' in.nc out.nc", {"in.nc"}, {"out.nc"}),
    ("ncatted -t -a units,tas,o,c,K in.nc out.nc", {"in.nc"}, {"out.nc"}),
    # values the old table took for flags (the value became a file)
    ("ncks -s '%g\\n' -v tas in.nc", {"in.nc"}, set()),
    ("ncks --chunk_byte 4096 in.nc out.nc", {"in.nc"}, {"out.nc"}),
    ("ncks --hdr_pad 1000 in.nc out.nc", {"in.nc"}, {"out.nc"}),
    ("ncks --data in.nc a.nc", {"a.nc"}, set()),  # NCO 5.1.4: --data takes a value
    ("ncra --cb 2000,2001,1,12,0 a.nc b.nc out.nc", {"a.nc", "b.nc"}, {"out.nc"}),
    ("ncecat -u ens a.nc b.nc out.nc", {"a.nc", "b.nc"}, {"out.nc"}),
    ("ncrename -g g1,g2 in.nc out.nc", {"in.nc"}, {"out.nc"}),
    # abbreviated long options, as getopt_long reads them
    ("ncks --var tas in.nc out.nc", {"in.nc"}, {"out.nc"}),
    ("ncks --bfr_sz 65536 in.nc out.nc", {"in.nc"}, {"out.nc"}),
    ("ncwa --out=out.nc -a lat in.nc", {"in.nc"}, {"out.nc"}),
    # options whose value is a file
    ("ncap2 -S prog.nco in.nc out.nc", {"prog.nco", "in.nc"}, {"out.nc"}),
    ("ncap2 --fl_spt=prog.nco in.nc out.nc", {"prog.nco", "in.nc"}, {"out.nc"}),
    ("ncks -b tas.bin -v tas in.nc out.nc", {"in.nc"}, {"tas.bin", "out.nc"}),
    ("ncks --fl_prn=p.txt -v tas in.nc", {"in.nc"}, {"p.txt"}),
    ("ncks -o out.nc -v tas in.nc", {"in.nc"}, {"out.nc"}),
    ("ncbo -y sbt a.nc b.nc out.nc", {"a.nc", "b.nc"}, {"out.nc"}),
    ("ncflint -w 0.3 -i time,1 a.nc b.nc out.nc", {"a.nc", "b.nc"}, {"out.nc"}),
    ("ncpdq -a lat,lon -P all_new -M flt_sht in.nc out.nc", {"in.nc"}, {"out.nc"}),
    # ncra -H is a flag (no input_file_list attribute), not a file list from stdin
    ("ncra -H a.nc b.nc out.nc", {"a.nc", "b.nc"}, {"out.nc"}),
    # netcdf-bin
    ("nccopy -u -s in.nc out.nc", {"in.nc"}, {"out.nc"}),
    ("ncdump -f c -v tas in.nc", {"in.nc"}, set()),
    ("ncgen -x -o out.nc m.cdl", {"m.cdl"}, {"out.nc"}),
])
def test_file_uses_of_nco_commands(d: Path, line: str, reads: set[str],
                                   writes: set[str]) -> None:
    plan = comp(d, line + "\n")
    (step,) = plan.steps
    assert not step.barrier
    assert files(d, step) == (reads, writes)


@pytest.mark.parametrize("line", [
    "ncks --rgr grid=grd.nc in.nc out.nc",    # writes a grid file named inside KEY=VALUE
    "ncks --map=map.nc in.nc out.nc",         # a map read, or written with --grd_src/--grd_dst
    "ncra -n 3,2,1 a.nc out.nc",              # NINTAP: input names made by the operator
    "ncremap -m map.nc in.nc out.nc",         # an NCO script whose files depend on its options
    # input names from stdin: none is a positional word (for ncra, one positional is the output)
    "echo x.nc | ncra -o out.nc",
    "ncks -o out.nc < list.txt",
    "ls x.nc a.nc | ncecat out.nc",
    "ncgen -b m.cdl",  # writes the file the CDL's `netcdf NAME {` names
])
def test_nco_commands_whose_files_are_not_in_the_words_run_as_barriers(d: Path,
                                                                     line: str) -> None:
    (d / "list.txt").write_text("x.nc\n")
    plan = comp(d, "ncks in.nc x.nc\n" + line + "\n")
    assert plan.steps[1].barrier, plan.steps[1]
    assert plan.dag.preds[1] == {0}  # after x.nc is written, by its real name


CHAIN = r"""set -e
ncks -O -v tas sresalb_ccma_cgcm3_1.nc w1.nc
ncks -O -v tas sresalb_ncar_ccsm3_0.nc w2.nc
ncecat -O -M w1.nc w2.nc ens.nc
ncap2 -O -s 'tas2=tas*2' -v w1.nc dbl.nc
ncwa -O -a time -b w2.nc tavg.nc
ncks -s '%.3f\n' -v tas -C tavg.nc > tavg.txt
ncks -O -b tas.bin -v tas w1.nc w1_copy.nc
rm w1.nc w2.nc
"""


def test_chain_whose_dependencies_the_old_table_lost(tmp_path: Path) -> None:
    """Each reader of w1.nc / w2.nc follows an option the old table misread (-M, -v, -b
    swallowed the file; -s turned its format into a file): the edges must be there, and the
    run gives bash's files (w1.nc, w2.nc are scratch: a lost edge reads a missing file)."""
    (tmp_path / "c").mkdir()
    make_models(tmp_path / "c", 2, nt=6)
    plan = comp(tmp_path / "c", CHAIN)
    p = plan.dag.preds
    assert [s.programs for s in plan.steps][2:7] == [["ncecat"], ["ncap2"], ["ncwa"], ["ncks"],
                                                      ["ncks"]]
    assert p[2] >= {0, 1} and p[3] >= {0} and p[4] >= {1} and p[5] >= {4} and p[6] >= {0}
    names = {os.path.basename(g.path) for g in plan.dag.scratch_groups()}
    assert names == {"w1.nc", "w2.nc"}
    (tmp_path / "run").mkdir()
    rb, rs = compare(tmp_path / "run", CHAIN, lambda d: make_models(d, 2, nt=6))
    assert rb.returncode == 0, rb.stderr
