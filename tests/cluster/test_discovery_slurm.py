"""`shoal info --json` inside real Slurm allocations reports exactly the nodes and CPUs Slurm
gave: checked against what slurmd itself tells a step on each node (``SLURMD_NODENAME``,
``SLURM_CPUS_ON_NODE``), not against the job-level variables discovery reads."""

from __future__ import annotations

import json
import sys

import pytest

# one task per node: it records slurmd's view of its node and shoal's view of the allocation
STEP = ('{py} -m shoal.cli.main info --json > {d}/$SLURMD_NODENAME.json && '
        'echo $SLURM_CPUS_ON_NODE > {d}/$SLURMD_NODENAME.cpus')


@pytest.mark.parametrize("salloc, nodes, cpus", [
    (["-N", "3", "-n", "6"], 3, 6),
    (["-N", "2", "--exclusive"], 2, 8),
])
def test_shoal_info_in_salloc_matches_slurm(slurm, tmp_path, salloc, nodes, cpus):
    step = STEP.format(py=sys.executable, d=tmp_path)
    r = slurm.run("salloc", *salloc, "bash", "-c",
                  f"{sys.executable} -m shoal.cli.main info --json > {tmp_path}/shell.json && "
                  f"srun -N {nodes} -n {nodes} --ntasks-per-node=1 bash -c '{step}'")
    assert r.returncode == 0, r.stderr
    shell = json.loads((tmp_path / "shell.json").read_text())["allocation"]
    assert shell["kind"] == "slurm" and shell["cpus"] == cpus and len(shell["nodes"]) == nodes
    # what slurmd says each node has, one step task per node
    truth = {p.stem: int(p.read_text()) for p in tmp_path.glob("*.cpus")}
    assert len(truth) == nodes
    assert {n["name"]: n["cpus"] for n in shell["nodes"]} == truth
    if "--exclusive" in salloc:
        assert set(truth.values()) == {4}
    for name, n in truth.items():
        step_view = json.loads((tmp_path / f"{name}.json").read_text())
        assert step_view["allocation"]["nodes"] == shell["nodes"]   # same allocation everywhere
        assert step_view["this_node"] == {"name": name, "cpus": n, "gpus": []}
    slurm.idle()
