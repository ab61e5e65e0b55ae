"""Transport choice and the hook through which shoal agents deliver."""

from __future__ import annotations

from pathlib import Path

import pytest

from shoal.bundle import (
    BundleError,
    StreamUnpacker,
    deliver,
    register_agent_transport,
    staged_install,
)
from shoal.bundle.archive import expected_digest, iter_file_chunks
from shoal.bundle.transport import choose


@pytest.fixture()
def no_allocation(monkeypatch):
    for k in ("SLURM_JOB_ID", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS",
              "PBS_NODEFILE", "LSB_HOSTS", "PE_HOSTFILE", "SHOAL_CONNECT"):
        monkeypatch.delenv(k, raising=False)


def test_auto_is_local_outside_any_allocation(no_allocation, bundles, local_base):
    assert choose("auto") == "local"
    rep = deliver(bundles[-1:], local_base / "auto-local" / "shoal")
    assert rep.transport == "local" and rep.status == 0
    assert (local_base / "auto-local" / "shoal" / "app" / "main.py").exists()


def test_auto_prefers_registered_agents_and_they_stream_into_a_staged_install(no_allocation, bundles, local_base):
    calls = []

    def agents_deliver(paths, dest):  # what an agent does on its node, minus the network
        calls.append((list(paths), dest))
        with staged_install(dest) as stage:
            for p in paths:
                u = StreamUnpacker(stage, p.name)
                for chunk in iter_file_chunks(p, 1 << 20):
                    u.feed(chunk)
                u.finish(expected_digest(p))

    register_agent_transport(agents_deliver)
    try:
        assert choose("auto") == "agents"
        dest = local_base / "agents" / "shoal"
        rep = deliver(bundles[-1:], dest)
        assert rep.transport == "agents"
        assert calls == [([Path(bundles[-1])], dest)]
        assert (dest / "app" / "main.py").exists()
    finally:
        register_agent_transport(None)
    with pytest.raises(BundleError, match="no shoal runtime to deliver through"):
        deliver(bundles[-1:], local_base / "x", transport="agents")


def test_auto_picks_mpi_inside_an_mpi_job(no_allocation, monkeypatch):
    pytest.importorskip("mpi4py")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")
    assert choose("auto") == "mpi"
    with pytest.raises(BundleError, match="unknown transport 'carrier-pigeon'"):
        choose("carrier-pigeon")
