"""`shoal script` leaves exactly the files `bash` leaves (netCDF compared with ncdump)."""

from __future__ import annotations

from pathlib import Path

import pytest
from script_helpers import compare, make_models, needs_nco

pytestmark = needs_nco

SWAMP_SAMPLE = """#!/bin/bash
# SWAMP paper sample script
for mdl in ccma_cgcm3_1 ncar_ccsm3_0; do
  ncwa -a lat,lon sresalb_${mdl}.nc avg_${mdl}.nc
  ncwa -d time,0,11 avg_${mdl}.nc 2000_${mdl}.nc
  ncdiff avg_${mdl}.nc 2000_${mdl}.nc anm_${mdl}.nc
done
ncea avg_*.nc sresalb_avg.nc
ncwa -d time,0,11 sresalb_avg.nc sresalb_avg_2k.nc
ncdiff sresalb_avg.nc sresalb_avg_2k.nc sresalb_anm.nc
"""

# the NCO benchmark's own workflow (bench/script/ipcc_like.sh), so what is timed is checked too
IPCC_LIKE = (Path(__file__).resolve().parents[2] / "bench" / "script" / "ipcc_like.sh").read_text()

# ensemble anomalies with intermediates removed, in-place edits, and a rewritten temp name
ANOMALY = """#!/bin/bash
set -e
out=${1:-results}
mkdir -p "$out"
n=0
for f in sresalb_*.nc; do
  m=${f#sresalb_}; m=${m%.nc}
  ncwa -O -a lat,lon "$f" tmp.nc
  ncks -O -v tas tmp.nc "ts_$m.nc"
  rm tmp.nc
  ncatted -O -a long_name,tas,o,c,"global mean of $m" "ts_$m.nc"
  n=$((n + 1))
done
nces ts_*.nc "$out/ens.nc"
for f in ts_*.nc; do
  ncbo --op_typ=sub "$f" "$out/ens.nc" "$out/anom_${f#ts_}"
done
ncrename -v tas,tas_anom "$out"/anom_*.nc 2>/dev/null || true
rm ts_*.nc
echo "$n models" > "$out/count.txt"
"""

SHELL_FEATURES = r"""#!/bin/bash
# loops, conditions, case, functions, arithmetic, pipelines, redirections, text tools
prefix=${1:-run}; shift || true
log() { echo "[$prefix] $*" >> log.txt; }
i=0
while [ "$i" -lt 4 ]; do
  case $((i % 2)) in
    0) printf '%s %d\n' even "$i" > "part_$i.txt" ;;
    *) echo "odd $i" > "part_$i.txt" ;;
  esac
  i=$((i + 1))
done
for p in part_*.txt; do log "saw $p"; done
cat part_*.txt | sort -r > all.txt
grep -c odd all.txt > nodd.txt
sed -i 's/even/EVEN/' part_0.txt
cp all.txt copy.txt && gzip -n copy.txt
cut -d' ' -f1 all.txt | uniq > kinds.txt
if [ -f nodd.txt ] && [ "$(cat /dev/null)" = "" ]; then log "done $#"; fi
for k in $(seq 1 3); do echo "$k" >> seq.txt; done
mv part_3.txt last.txt
head -n 1 last.txt | tr a-z A-Z > upper.txt 2> err.txt
awk '{print $2}' all.txt > col2.txt
tmpname=work.tmp
echo one > "$tmpname"; cat "$tmpname" > first.txt; rm "$tmpname"
echo two > "$tmpname"; cat "$tmpname" > second.txt; rm -f "$tmpname"
mkdir -p sub/dir && cd sub/dir
echo "in $(basename "$PWD")" > where.txt
cd ../..
wc -l < all.txt > count.txt
export GREETING="hi there"
cat <<EOF > heredoc.txt
$GREETING from $prefix: $(( 6 * 7 ))
EOF
cat <<'EOF' | tr a-z A-Z > quoted_heredoc.txt
$GREETING stays literal
EOF
LC_ALL=C sort -k2 all.txt > byfield.txt
"""


# expansions and control flow, checked through what the script prints
SEMANTICS = r"""#!/bin/bash
x=hello.tar.gz; empty=
echo "${x%%.*}" "${x#*.}" "${x/l/L}" "${x//l/L}" "${#x}" "${x:1:3}" "${x: -2}" "${empty:-d}" "${unset-u}" "${x:+alt}"
echo $x{,.bak} pre{1..3}post {a..c} "{a,b}"
case $x in *.gz) echo gz ;& *.zip) echo fell ;; *) echo none ;; esac
case b in a) echo a ;; b|c) echo bc ;;& *) echo any ;; esac
i=5; while (( i > 0 )); do i=$((i - 2)); done; echo "i=$i"
for ((j=0, k=10; j<3; j++, k--)); do echo "$j/$k"; done
f() { echo "f($#): $1|${2:-none}"; shift; echo "rest: $*"; }
f one "two words" three
printf '%s-%s\\n' a b c d
printf '%5.2f|%-4s|%03d\\n' 3.14159 ab 7
echo $(( 7 / 2 )) $(( -7 / 2 )) $(( 7 % -3 )) $(( 2 ** 10 )) $(( 1 << 4 )) $(( 5 > 3 && 2 > 1 ))
set -- p q r; echo "$#" "$2" "$@"
s="a b  c"; echo $s; echo "$s"
[ -z "" ] && echo z; [ -n "" ] || echo notn; [ 3 -ge 3 ] && [ abc != abd ] && echo cmp
[[ hello == h*o ]] && echo glob; [[ abc =~ ^a.c$ ]] && echo regex
echo "$(basename /a/b/c.nc .nc) $(dirname /a/b/c.nc) $(expr 6 \* 7) $(echo "  spaced  ")"
n=$(seq 3 | tr '\\n' ' '); echo "[$n]"
echo ~ | sed "s|$HOME|HOME|"
"""


def setup_models(n: int):
    def setup(d: Path) -> None:
        make_models(d, n, nt=24)
    return setup


def test_swamp_sample_script(tmp_path: Path) -> None:
    rb, rs = compare(tmp_path, SWAMP_SAMPLE, setup_models(2))
    assert rs.returncode == 0


def test_ipcc_like_ensemble_script(tmp_path: Path) -> None:
    compare(tmp_path, IPCC_LIKE, setup_models(4))


@pytest.mark.parametrize("backend", ["shoal", "threads"])
def test_anomalies_with_inplace_edits_and_rm(tmp_path: Path, backend: str) -> None:
    extra = ("--local-threads",) if backend == "threads" else ()
    compare(tmp_path, ANOMALY, setup_models(3), "outdir", extra=extra)


def test_shell_features_and_coreutils(tmp_path: Path) -> None:
    rb, rs = compare(tmp_path, SHELL_FEATURES, lambda d: None, "xx", "a", "b")
    assert rs.stdout == rb.stdout


def test_disk_only_scratch_and_swamp_clusters(tmp_path: Path) -> None:
    compare(tmp_path, SWAMP_SAMPLE, setup_models(2), extra=("--no-shm", "--cluster", "swamp"))


def test_expansions_and_control_flow_print_what_bash_prints(tmp_path: Path) -> None:
    rb, rs = compare(tmp_path, SEMANTICS, lambda d: None)
    assert rb.stdout.count("\n") > 20
    assert rs.stdout == rb.stdout
