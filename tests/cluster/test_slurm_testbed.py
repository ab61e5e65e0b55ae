"""The test bed itself: the carried recipe gives 4 nodes x 4 CPUs that run jobs."""

from shoal.launch.allocation import discover


def test_salloc_sees_the_nodes_and_discovery_reads_them(slurm):
    r = slurm.run("salloc", "-N", "4", "--exclusive", "python3", "-c",
                  "import os; print(os.environ['SLURM_JOB_NODELIST'], "
                  "os.environ['SLURM_JOB_CPUS_PER_NODE'])")
    assert r.returncode == 0, r.stderr
    nodelist, cpus = r.stdout.split()
    alloc = discover({"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": nodelist,
                      "SLURM_JOB_CPUS_PER_NODE": cpus})
    assert alloc is not None
    assert [n.name for n in alloc.nodes] == ["n1", "n2", "n3", "n4"]
    assert alloc.cpus == 16
    slurm.idle()
