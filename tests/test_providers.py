"""Pilot-job providers (shoal/launch/providers.py) and the `shoal alloc` policy: job scripts
rendered from the shipped templates (checked with `bash -n`), and the batch systems' output
parsed from strings recorded on real systems (Slurm 22.05 here; PBS Pro / Torque manuals)."""

from __future__ import annotations

import subprocess

import pytest

from shoal.cli.alloc import Backoff, Job, Policy
from shoal.cli.main import main
from shoal.launch import providers as P

OPTS = dict(connect="/shared/my run/run.json", nodes=2, walltime=1800.0, cpus_per_node=4,
            gpus_per_node=1, partition="debug", account="proj7",
            directives=["#SBATCH --constraint=x"], idle_timeout=30.0,
            output="/shared/alloc/shoal-alloc-%j.out", shoal=("/opt/py/bin/python", "-m", "shoal.cli.main"))


def bash_syntax_ok(script: str) -> None:
    r = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True)
    assert r.returncode == 0, r.stderr


def test_slurm_script_from_options() -> None:
    s = P.Slurm().script(P.JobOptions(**OPTS))
    lines = s.splitlines()
    assert lines[0] == "#!/bin/bash"
    for want in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --time=0:30:00",
                 "#SBATCH --output=/shared/alloc/shoal-alloc-%j.out", "#SBATCH --partition=debug",
                 "#SBATCH --account=proj7", "#SBATCH --cpus-per-task=4",
                 "#SBATCH --gpus-per-node=1", "#SBATCH --constraint=x"):
        assert want in lines, want
    # every directive comes before the first command (sbatch stops reading them there)
    first_cmd = next(i for i, ln in enumerate(lines) if ln and not ln.startswith("#"))
    assert max(i for i, ln in enumerate(lines) if ln.startswith("#SBATCH")) < first_cmd
    assert "srun --overlap --nodes=2 --ntasks=2 --ntasks-per-node=1" in s
    assert ("/opt/py/bin/python -m shoal.cli.main agent --connect '/shared/my run/run.json' "
            "--idle-timeout 30 --slots 4") in s
    assert 'alloc-$SLURM_JOB_ID-$SLURMD_NODENAME' in s
    assert "{{" not in s and "--walltime" not in s  # Slurm tells the agent its end itself
    bash_syntax_ok(s)


def test_slurm_script_minimal_has_no_empty_blocks() -> None:
    s = P.Slurm().script(P.JobOptions(connect="/r.json", idle_timeout=0))
    assert "--partition" not in s and "--account" not in s and "--cpus-per-task" not in s
    assert "--idle-timeout" not in s and "--slots" not in s  # 0: agents stay to the walltime
    header = s.split("\n\n")[0]  # the directives stay one block: no blank line left behind
    assert header.count("#SBATCH") == 5
    bash_syntax_ok(s)


def test_the_agent_line_runs_as_written(tmp_path) -> None:
    """The srun line's bash -c wrapper passes the agent command and appends the node's name."""
    s = P.Slurm().script(P.JobOptions(connect="/a b/r.json", shoal=("echo",)))
    line = s[s.index("srun "):].replace("\\\n", " ")
    cmd = line[line.index("/bin/bash"):]
    r = subprocess.run(["bash", "-c", cmd], text=True, capture_output=True,
                       env={"SLURM_JOB_ID": "57", "SLURMD_NODENAME": "n3", "PATH": "/usr/bin:/bin"})
    assert r.stdout.split() == ["agent", "--connect", "/a", "b/r.json", "--idle-timeout", "60",
                                "--name", "alloc-57-n3"]


def test_pbs_script_from_options() -> None:
    o = P.JobOptions(**{**OPTS, "directives": ["-l mem=8gb"]})
    s = P.PBS().script(o)
    lines = s.splitlines()
    for want in ("#PBS -l select=2:ncpus=4:ngpus=1", "#PBS -l walltime=0:30:00", "#PBS -q debug",
                 "#PBS -A proj7", "#PBS -l mem=8gb", "#PBS -o /shared/alloc/shoal-alloc-%j.out"):
        assert want in lines, want
    assert "pbsdsh -u" in s
    # PBS tells a job no end time: the agent is given the walltime
    assert "--idle-timeout 30 --slots 4 --walltime 1800" in s
    bash_syntax_ok(s)


def test_directive_for_the_wrong_batch_system_is_refused() -> None:
    with pytest.raises(P.TemplateError, match=r"--directive '#PBS -l mem=1gb'.*#SBATCH"):
        P.Slurm().script(P.JobOptions(connect="/r.json", directives=["#PBS -l mem=1gb"]))


def test_user_template(tmp_path) -> None:
    t = "#!/bin/sh\n#SBATCH --nodes={{nodes}}\n{{directives}}\nmodule load x\n{{agent}}\n"
    s = P.Slurm().script(P.JobOptions(connect="/r.json", nodes=3), t, "my.sh")
    assert s == ("#!/bin/sh\n#SBATCH --nodes=3\nmodule load x\n"
                 f"{P.JobOptions(connect='/r.json').shoal[0]} -m shoal.cli.main agent "
                 "--connect /r.json --idle-timeout 60\n")
    with pytest.raises(P.TemplateError, match=r"my.sh:2: unknown placeholder \{\{nodez\}\}"):
        P.Slurm().script(P.JobOptions(connect="/r.json"), "#!/bin/sh\n#SBATCH -N {{nodez}}\n{{agent}}\n", "my.sh")
    with pytest.raises(P.TemplateError, match=r"my.sh: no \{\{agent\}\} placeholder"):
        P.Slurm().script(P.JobOptions(connect="/r.json"), "#!/bin/sh\nexit 1\n", "my.sh")


def test_hms() -> None:
    assert P.hms(59.2) == "0:01:00"
    assert P.hms(3600) == "1:00:00"
    assert P.hms(2 * 86400 + 61) == "48:01:01"


# ---- recorded output -----------------------------------------------------------------------
def test_parse_sbatch() -> None:
    assert P.parse_sbatch("57\n") == "57"
    assert P.parse_sbatch("58;cluster2\n") == "58"
    with pytest.raises(P.ProviderError, match="sbatch printed no job id"):
        P.parse_sbatch("Submitted batch job 57\n")  # not --parsable
    with pytest.raises(P.ProviderError):
        P.parse_sbatch("")


# `squeue -h -t all -j ... -o '%i|%T|%r'` on this Slurm 22.05
SQUEUE = """\
49|CANCELLED|Priority
46|PENDING|Resources
47|PENDING|Priority
45|RUNNING|None
52|COMPLETED|None
51|FAILED|NonZeroExitCode
53|TIMEOUT|TimeLimit
54|COMPLETING|None
"""


def test_parse_squeue() -> None:
    st = P.parse_squeue(SQUEUE)
    assert st["46"] == P.JobStatus(P.PENDING, "PENDING", "Resources")
    assert st["45"] == P.JobStatus(P.RUNNING, "RUNNING", "")
    assert st["52"] == P.JobStatus(P.ENDED, "COMPLETED", "")
    assert st["51"] == P.JobStatus(P.ENDED, "FAILED", "NonZeroExitCode", failed=True)
    assert st["53"].failed and st["53"].state == P.ENDED
    assert not st["49"].failed and st["49"].state == P.ENDED
    assert st["54"].state == P.ENDED and not st["54"].failed
    assert P.parse_squeue("") == {}


def test_parse_qsub() -> None:
    assert P.parse_qsub("1234.pbs01\n") == "1234.pbs01"
    assert P.parse_qsub("1234.pbs01.cluster.example.org\n") == "1234.pbs01.cluster.example.org"
    assert P.parse_qsub("77[].pbs01\n") == "77[].pbs01"
    assert P.parse_qsub("1234\n") == "1234"
    with pytest.raises(P.ProviderError, match="qsub printed no job id"):
        P.parse_qsub("qsub: Job rejected by all possible destinations\n")


# `qstat -f` (PBS Pro: Exit_status, F with -x history; Torque: exit_status, C); long values
# continue on tab-indented lines
QSTAT = """\
Job Id: 1234.pbs01
    Job_Name = shoal-agents
    Job_Owner = ana@login1
    job_state = Q
    queue = workq
    comment = Not Running: Insufficient amount of resource: ncpus (R: 8 A: 4 T
\t: 64)
    Variable_List = PBS_O_HOME=/home/ana,PBS_O_LANG=C.UTF-8,
\tPBS_O_LOGNAME=ana

Job Id: 1235.pbs01
    Job_Name = shoal-agents
    job_state = R
    exec_host = n3/0*4

Job Id: 1236.pbs01
    job_state = F
    Exit_status = 1

Job Id: 1237.torque.example.org
    job_name = shoal-agents
    job_state = C
    exit_status = 0
"""


def test_parse_qstat() -> None:
    st = P.parse_qstat(QSTAT)
    assert st["1234.pbs01"].state == P.PENDING
    assert st["1234.pbs01"].reason == ("Not Running: Insufficient amount of resource: ncpus "
                                       "(R: 8 A: 4 T: 64)")
    assert st["1235.pbs01"] == P.JobStatus(P.RUNNING, "R", "")
    assert st["1236.pbs01"] == P.JobStatus(P.ENDED, "F", "Exit_status=1", failed=True)
    assert st["1237.torque.example.org"] == P.JobStatus(P.ENDED, "C", "Exit_status=0")


# ---- the policy ----------------------------------------------------------------------------
def job(i: int, state: str = P.PENDING, nodes: int = 1, **agents: int) -> Job:
    return Job(str(i), nodes, f"/o/{i}.out", state=state, agents=dict(agents))


def test_policy_submits_while_queued_work_exceeds_slots() -> None:
    p = Policy(max_jobs=2, backlog=1, slots_per_node=4)
    assert p.nodes_wanted(queued=0, slots_present=0, jobs=[]) == 0
    assert p.nodes_wanted(queued=1, slots_present=0, jobs=[]) == 1
    assert p.nodes_wanted(queued=4, slots_present=4, jobs=[]) == 0     # present slots suffice
    # a queued job's 4 slots are on their way: no second job for 4 queued tasks
    assert p.nodes_wanted(queued=4, slots_present=0, jobs=[job(1)]) == 0
    # the backlog: one job waiting in the batch queue at a time
    assert p.nodes_wanted(queued=40, slots_present=0, jobs=[job(1)]) == 0
    assert p.nodes_wanted(queued=40, slots_present=4, jobs=[job(1, P.RUNNING, a=4)]) == 1
    # never more than max_jobs queued + running; ended jobs do not count
    two = [job(1, P.RUNNING, a=4), job(2, P.RUNNING, b=4)]
    assert p.nodes_wanted(queued=40, slots_present=8, jobs=two) == 0
    two[0].state = P.ENDED
    assert p.nodes_wanted(queued=40, slots_present=4, jobs=two) == 1


def test_policy_sizes_jobs_to_the_work() -> None:
    p = Policy(max_jobs=4, backlog=2, max_nodes_per_job=3, slots_per_node=4)
    assert p.nodes_wanted(queued=5, slots_present=0, jobs=[]) == 2
    assert p.nodes_wanted(queued=100, slots_present=0, jobs=[]) == 3
    assert p.nodes_wanted(queued=1, slots_present=0, jobs=[]) == 1
    # a started 2-node job with one agent joined still owes 4 slots
    assert p.expected([job(1, P.RUNNING, nodes=2, a=4)]) == 4


def test_backoff_doubles_caps_and_resets() -> None:
    b = Backoff(delay=2, limit=4, cap=5)
    assert [b.failed(0) for _ in range(3)] == [2, 4, 5]
    assert not b.exhausted and b.until == 5
    b.ok()
    assert b.count == 0 and b.failed(10) == 2
    for _ in range(3):
        b.failed(10)
    assert b.exhausted


# ---- the command line ----------------------------------------------------------------------
def test_print_script(capsys, tmp_path) -> None:
    rc = main(["alloc", "--batch", "slurm", "--print-script", "--connect", str(tmp_path / "r.json"),
               "--nodes-per-job", "2", "--walltime", "10:00", "--directive=--exclusive"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "#SBATCH --nodes=2" in out and "#SBATCH --time=0:10:00" in out
    assert "#SBATCH --exclusive" in out
    assert f"--connect {tmp_path / 'r.json'}" in out
    assert f"#SBATCH --output={tmp_path / 'shoal-alloc'}/shoal-alloc-%j.out" in out


@pytest.mark.parametrize("argv, msg", [
    (["--max-jobs", "0"], "--max-jobs 0: must be 1 or more"),
    (["--nodes-per-job", "2", "--max-nodes-per-job", "3"], "not both"),
    (["--walltime", "soon"], "--walltime 'soon'"),
    (["--idle-timeout", "-1"], "--idle-timeout -1: must be 0 or more"),
    (["--idle-timeout", "2", "--interval", "5"], "--interval 5 must be shorter than --idle-timeout 2"),
    (["--template", "/nonexistent.sh"], "--template /nonexistent.sh: No such file"),
    (["--connect", "/nonexistent/run.json"], "--connect /nonexistent/run.json: no such file"),
])
def test_bad_options_are_one_line(capsys, argv, msg) -> None:
    rc = main(["alloc", "--batch", "slurm", *argv])
    err = capsys.readouterr().err
    assert rc == 2
    assert msg in err and err.count("\n") == 1, err


def test_the_pbs_agent_line_runs_as_written() -> None:
    """pbsdsh's command (everything after `pbsdsh -u --`) passes the environment on and names
    the agent after the job and the node."""
    s = P.PBS().script(P.JobOptions(connect="/r.json", shoal=("echo",)))
    line = s[s.index("pbsdsh -u -- ") + len("pbsdsh -u -- "):].replace("\\\n", " ")
    r = subprocess.run(["bash", "-c", line], text=True, capture_output=True,
                       env={"PBS_JOBID": "1234.pbs01", "PATH": "/usr/bin:/bin"})
    host = subprocess.run(["hostname", "-s"], text=True, capture_output=True).stdout.strip()
    assert r.stdout.split() == ["agent", "--connect", "/r.json", "--idle-timeout", "60",
                                "--walltime", "3600", "--name", f"alloc-1234.pbs01-{host}"]


def test_a_jobs_last_line_skips_the_batch_systems_cancel_notice(tmp_path) -> None:
    """When shoal cancels a job that never joined, Slurm appends its own notice; the error
    names the job's last own line instead (what the user needs to see)."""
    from shoal.cli.alloc import _tail
    out = tmp_path / "shoal-alloc-9.out"
    out.write_text("waiting\n\nslurmstepd-n1: error: *** JOB 9 ON n1 CANCELLED AT "
                   "2026-11-24T00:16:44 ***\n")
    assert _tail(str(out)) == "waiting"
    out.write_text("slurmstepd-n1: error: *** JOB 9 ON n1 CANCELLED AT 2026-11-24T00:16:44 ***\n")
    assert _tail(str(out)) == ""
    out.write_text("module: python/3.11 not found\n")
    assert _tail(str(out)) == "module: python/3.11 not found"
