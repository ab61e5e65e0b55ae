"""Allocation discovery from recorded environments and files (Slurm, PBS, SGE, LSF, Flux,
SCOOP-style hostfiles, --hosts), and `shoal info` run as a real process on one of them.

The environments are recorded as the batch systems write them; the Slurm ones without
PATH so that discovery asks no squeue (see ``_squeue_end``)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from shoal.launch.allocation import (
    AllocationError,
    Node,
    discover,
    flux_resources,
    idset,
    parse_hosts,
    read_hostfile,
    this_node,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---- Slurm ----------------------------------------------------------------------------
def test_slurm_compressed_cpu_counts_follow_the_node_order():
    a = discover({"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-3]",
                  "SLURM_JOB_CPUS_PER_NODE": "4(x2),1"})
    assert a is not None and a.kind == "slurm" and a.job_id == "7"
    assert a.nodes == (Node("n1", 4), Node("n2", 4), Node("n3", 1))
    assert a.cpus == 9 and a.end_time is None


def test_slurm_padded_ranges_and_several_bracket_groups():
    a = discover({"SLURM_JOB_ID": "8", "SLURM_JOB_NODELIST": "gpu[01-03],cn[7,9-10],rack[1-2]-n[1-2]",
                  "SLURM_JOB_CPUS_PER_NODE": "8(x3),2(x3),1(x4)"})
    assert [n.name for n in a.nodes] == ["gpu01", "gpu02", "gpu03", "cn7", "cn9", "cn10",
                                         "rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]
    assert [n.cpus for n in a.nodes] == [8, 8, 8, 2, 2, 2, 1, 1, 1, 1]


def test_slurm_gpus_end_time_and_the_recorded_salloc_shell():
    # recorded in `salloc -N 3 -n 6` on the test bed (Slurm 22.05: no SLURM_JOB_END_TIME)
    env = {"SLURM_JOB_ID": "18", "SLURM_JOBID": "18", "SLURM_JOB_NODELIST": "n[1-3]",
           "SLURM_NODELIST": "n[1-3]", "SLURM_JOB_CPUS_PER_NODE": "3,2,1",
           "SLURM_TASKS_PER_NODE": "3,2,1", "SLURM_JOB_NUM_NODES": "3"}
    a = discover(env)
    assert [(n.name, n.cpus, n.gpus) for n in a.nodes] == [("n1", 3, ()), ("n2", 2, ()), ("n3", 1, ())]
    g = discover({**env, "SLURM_JOB_GPUS": "0,2", "SLURM_JOB_END_TIME": "1800000000"})
    assert all(n.gpus == ("0", "2") for n in g.nodes) and g.end_time == 1800000000.0
    counted = discover({**env, "SLURM_GPUS_ON_NODE": "2"})
    assert all(n.gpus == ("0", "1") for n in counted.nodes)
    # inside a step: this node is SLURMD_NODENAME's entry
    assert this_node({**env, "SLURMD_NODENAME": "n2", "SLURM_CPUS_ON_NODE": "2"}) == Node("n2", 2)


@pytest.mark.parametrize("env, needle", [
    ({"SLURM_JOB_NODELIST": "n[1-", "SLURM_JOB_CPUS_PER_NODE": "1"}, "SLURM_JOB_NODELIST='n[1-'"),
    ({"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_CPUS_PER_NODE": "4(x2"}, "SLURM_JOB_CPUS_PER_NODE='4(x2'"),
    ({"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_CPUS_PER_NODE": "4(x3)"}, "names 3 nodes"),
    ({"SLURM_JOB_NODELIST": "n1", "SLURM_JOB_CPUS_PER_NODE": "1", "SLURM_GPUS_ON_NODE": "x"},
     "SLURM_GPUS_ON_NODE='x'"),
])
def test_slurm_bad_values_name_the_variable(env, needle):
    with pytest.raises(AllocationError) as e:
        discover({"SLURM_JOB_ID": "1", **env})
    assert needle in str(e.value) and "\n" not in str(e.value)


# ---- PBS ------------------------------------------------------------------------------
def test_pbs_nodefile_repeats_are_cpus_and_walltime_counts_from_the_nodefile(tmp_path):
    nf = tmp_path / "aux" / "1234.pbs01"
    nf.parent.mkdir()
    nf.write_text("cn001\n" * 4 + "cn002\n" * 4 + "cn003\n" * 2)
    os.utime(nf, (1_700_000_000, 1_700_000_000))
    env = {"PBS_JOBID": "1234.pbs01", "PBS_NODEFILE": str(nf), "PBS_ENVIRONMENT": "PBS_BATCH",
           "PBS_WALLTIME": "3600", "CUDA_VISIBLE_DEVICES": "0,1"}
    a = discover(env)
    assert a.kind == "pbs" and a.job_id == "1234.pbs01" and a.source == f"PBS_NODEFILE={nf}"
    assert a.nodes == (Node("cn001", 4, ("0", "1")), Node("cn002", 4, ("0", "1")),
                       Node("cn003", 2, ("0", "1")))
    assert a.end_time == 1_700_003_600
    assert discover({**env, "PBS_WALLTIME": "01:30:00"}).end_time == 1_700_005_400


def test_pbs_gpufile_gives_gpus_per_node(tmp_path):
    nf, gf = tmp_path / "nodes", tmp_path / "gpus"
    nf.write_text("cn001\ncn001\ncn002\ncn002\n")
    gf.write_text("cn001-gpu0\ncn001-gpu1\ncn002-gpu1\n")
    a = discover({"PBS_JOBID": "9", "PBS_NODEFILE": str(nf), "PBS_GPUFILE": str(gf)})
    assert a.nodes == (Node("cn001", 2, ("0", "1")), Node("cn002", 2, ("1",)))


def test_pbs_bad_files_name_the_variable_and_line(tmp_path):
    with pytest.raises(AllocationError, match=r"^PBS_NODEFILE=/nonexistent/nodes: cannot read it"):
        discover({"PBS_NODEFILE": "/nonexistent/nodes"})
    nf = tmp_path / "nodes"
    nf.write_text("cn001\ncn001 4\n")
    with pytest.raises(AllocationError, match=rf"^PBS_NODEFILE {nf}:2: 'cn001 4' is not one host name"):
        discover({"PBS_NODEFILE": str(nf)})
    nf.write_text("cn001\n")
    with pytest.raises(AllocationError, match=r"PBS_WALLTIME='1h': expected seconds or H:M:S"):
        discover({"PBS_NODEFILE": str(nf), "PBS_WALLTIME": "1h"})


# ---- SGE ------------------------------------------------------------------------------
def test_sge_pe_hostfile(tmp_path):
    pe = tmp_path / "pe_hostfile"
    pe.write_text("node07.cluster 16 all.q@node07.cluster UNDEFINED\n"
                  "node09.cluster 8 all.q@node09.cluster 0,0:0,1\n"
                  "node07.cluster 4 long.q@node07.cluster UNDEFINED\n")
    a = discover({"JOB_ID": "4711", "PE_HOSTFILE": str(pe), "NSLOTS": "28"})
    assert a.kind == "sge" and a.job_id == "4711"
    assert a.nodes == (Node("node07.cluster", 20), Node("node09.cluster", 8))
    pe.write_text("node07 16 all.q@node07 UNDEFINED\nnode08 many all.q@node08 UNDEFINED\n")
    with pytest.raises(AllocationError, match=rf"^PE_HOSTFILE {pe}:2: 'node08 many"):
        discover({"JOB_ID": "1", "PE_HOSTFILE": str(pe)})


# ---- LSF ------------------------------------------------------------------------------
def test_lsf_djob_hostfile_and_mcpu_hosts(tmp_path):
    hf = tmp_path / "1234.hostfile"
    hf.write_text("h1\nh1\nh1\nh1\nh2\nh2\n")
    env = {"LSB_JOBID": "1234", "LSB_DJOB_HOSTFILE": str(hf), "LSB_MCPU_HOSTS": "h1 4 h2 2",
           "LSB_HOSTS": "h1 h1 h1 h1 h2 h2", "CUDA_VISIBLE_DEVICES": "0"}
    a = discover(env)
    assert a.kind == "lsf" and a.source == f"LSB_DJOB_HOSTFILE={hf}" and a.job_id == "1234"
    assert a.nodes == (Node("h1", 4, ("0",)), Node("h2", 2, ("0",)))
    del env["LSB_DJOB_HOSTFILE"]
    m = discover(env)
    assert m.source == "LSB_MCPU_HOSTS" and m.nodes == a.nodes
    with pytest.raises(AllocationError, match=r"^LSB_MCPU_HOSTS='h1 4 h2': expected 'host slots' pairs"):
        discover({**env, "LSB_MCPU_HOSTS": "h1 4 h2"})


# ---- Flux -----------------------------------------------------------------------------
# RFC 20's own example: ranks 19-22 on node186..189, 48 cores and 8 GPUs each
R_EXAMPLE = json.dumps({
    "version": 1,
    "execution": {"R_lite": [{"rank": "19-22", "children": {"core": "0-47", "gpu": "0-7"}}],
                  "nodelist": ["node[186-189]"], "starttime": 1676560000, "expiration": 1676561800},
})


def test_flux_resource_set():
    a = flux_resources(R_EXAMPLE, "`flux job info f1234 R`", "f1234")
    assert [n.name for n in a.nodes] == ["node186", "node187", "node188", "node189"]
    assert all(n.cpus == 48 and n.gpus == tuple(str(i) for i in range(8)) for n in a.nodes)
    assert a.end_time == 1676561800 and a.job_id == "f1234" and a.cpus == 192
    mixed = json.dumps({"version": 1, "execution": {
        "R_lite": [{"rank": "0", "children": {"core": "0-3"}},
                   {"rank": "1-2", "children": {"core": "[0-1,4]", "gpu": "1"}}],
        "nodelist": ["a1", "b[1-2]"], "expiration": 0}})
    m = flux_resources(mixed, "test")
    assert m.nodes == (Node("a1", 4), Node("b1", 3, ("1",)), Node("b2", 3, ("1",)))
    assert m.end_time is None
    assert idset("0-2,5") == [0, 1, 2, 5]
    with pytest.raises(AllocationError, match=r"^test: not an RFC 20 resource set"):
        flux_resources("{}", "test")


def test_flux_without_the_flux_command_says_so(tmp_path):
    with pytest.raises(AllocationError, match=r"^FLUX_JOB_ID is set but the flux command is not on PATH"):
        discover({"FLUX_JOB_ID": "f1234", "FLUX_URI": "local:///tmp/flux", "PATH": str(tmp_path)})


# ---- hostfile and --hosts -------------------------------------------------------------
def test_scoop_hostfile(tmp_path):
    hf = tmp_path / "hosts"
    hf.write_text("# the cluster\n\nnodeA 4\nnodeB workers=2   # SCOOP's documented form\n"
                  "nodeC\nnode[1-2] slots=3\nnodeA 2\nnodeD:5\n")
    a = read_hostfile(hf)
    assert a.kind == "hostfile" and a.source == f"--hostfile {hf}"
    assert a.nodes == (Node("nodeA", 6), Node("nodeB", 2), Node("nodeC", 0),
                       Node("node1", 3), Node("node2", 3), Node("nodeD", 5))
    assert discover({"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "n1"}, hostfile=hf) == a


@pytest.mark.parametrize("text, line, what", [
    ("nodeA 4\nnodeB 4 extra\n", 2, "expected 'host' or 'host N'"),
    ("nodeA four\n", 1, "the count 'four' is not a whole number >= 1"),
    ("\n\nnodeA 0\n", 3, "the count '0' is not a whole number >= 1"),
    ("nodeA cores=4\n", 1, "unknown key 'cores'"),
    ("node/A 4\n", 1, "'node/A' is not a host name"),
    ("nodeA:four\n", 1, "'nodeA:four' is not a host name"),
    ("node[1-\n", 1, "bad host range"),
    ("nodeA\nnodeA 2\n", 2, "nodeA is named twice"),
])
def test_hostfile_junk_lines_name_file_and_line(tmp_path, text, line, what):
    hf = tmp_path / "hosts"
    hf.write_text(text)
    with pytest.raises(AllocationError) as e:
        read_hostfile(hf)
    msg = str(e.value)
    assert msg.startswith(f"{hf}:{line}: ") and what in msg and "\n" not in msg


def test_hosts_string():
    assert parse_hosts("h1:4,h2:4").nodes == (Node("h1", 4), Node("h2", 4))
    assert parse_hosts("h1 h2").nodes == (Node("h1", 0), Node("h2", 0))
    assert parse_hosts(" h1:2, h1:2 ").nodes == (Node("h1", 4),)
    assert parse_hosts("n[1-3]:2 x").nodes == (Node("n1", 2), Node("n2", 2), Node("n3", 2),
                                                 Node("x", 0))
    assert parse_hosts("n[01,03]:1").nodes == (Node("n01", 1), Node("n03", 1))
    with pytest.raises(AllocationError, match=r"^--hosts 'h1:x': 'h1:x': the count 'x'"):
        parse_hosts("h1:x")
    with pytest.raises(AllocationError, match="--hosts is empty"):
        parse_hosts(" , ")


def test_order_of_sources_and_none_outside(tmp_path):
    nf = tmp_path / "nodes"
    nf.write_text("cn1\n")
    slurm = {"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "n1", "SLURM_JOB_CPUS_PER_NODE": "2"}
    assert discover({**slurm, "PBS_NODEFILE": str(nf)}).kind == "slurm"
    assert discover({"PBS_NODEFILE": str(nf), "PE_HOSTFILE": "/x"}).kind == "pbs"
    assert discover({**slurm}, hosts="h1:1").kind == "hosts"
    assert discover({"HOME": "/root", "PATH": "/usr/bin"}) is None
    assert this_node({"HOME": "/root"}) is None


def test_this_node_matches_this_host_and_counts_its_own_cores(tmp_path):
    host = socket.gethostname()
    nf = tmp_path / "nodes"
    nf.write_text(f"other\n{host}\n{host}\n")
    assert this_node({"PBS_NODEFILE": str(nf)}) == Node(host, 2)
    hf = tmp_path / "hosts"
    hf.write_text("localhost\nelsewhere 8\n")
    assert this_node({}, hostfile=hf) == Node("localhost", os.cpu_count() or 1)


# ---- `shoal info` as a real process ----------------------------------------------------
def _info(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    base = {"PATH": os.environ["PATH"], "PYTHONPATH": ROOT, "HOME": os.environ.get("HOME", "/")}
    return subprocess.run([sys.executable, "-m", "shoal.cli.main", "info", *args],
                          env={**base, **env}, capture_output=True, text=True, timeout=60)


def test_shoal_info_reports_a_recorded_pbs_job(tmp_path):
    nf = tmp_path / "nodes"
    nf.write_text("cn001\n" * 3 + "cn002\n" * 3)
    env = {"PBS_JOBID": "77.pbs", "PBS_NODEFILE": str(nf), "PBS_WALLTIME": "7200"}
    t0 = time.time()
    os.utime(nf, (t0, t0))
    r = _info(env, "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    a = info["allocation"]
    assert (a["kind"], a["job_id"], a["cpus"]) == ("pbs", "77.pbs", 6)
    assert a["nodes"] == [{"name": "cn001", "cpus": 3, "gpus": []}, {"name": "cn002", "cpus": 3, "gpus": []}]
    assert 119 <= a["minutes_left"] <= 120 and abs(a["end_time"] - (t0 + 7200)) < 1
    assert info["this_node"] is None and info["local_default"] is None
    assert set(info["launchers"]) == {"srun", "mpirun", "mpiexec", "pbsdsh", "ssh", "flux"}
    from shoal.transport.connfile import host_address

    assert info["address"]["address"] == host_address()[0]
    text = _info(env)
    assert text.returncode == 0, text.stderr
    assert "allocation: pbs job 77.pbs" in text.stdout and "cn002  3 CPUs" in text.stdout
    assert "min left" in text.stdout and "address: " in text.stdout


def test_shoal_info_outside_any_allocation_and_on_bad_input(tmp_path):
    r = _info({}, "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["allocation"] is None and info["local_default"] == {"cpus": os.cpu_count()}
    text = _info({})
    assert "allocation: none" in text.stdout and f"{os.cpu_count()} CPUs (os.cpu_count())" in text.stdout
    hf = tmp_path / "hosts"
    hf.write_text("good 2\nbad line here\n")
    bad = _info({}, "--hostfile", str(hf))
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip() == f"shoal info: {hf}:2: 'bad line here': expected 'host' or 'host N'"
