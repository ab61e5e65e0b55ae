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
from script_helpers import needs_nco

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
        head, tab, _desc = line.strip().partition("\t")
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
