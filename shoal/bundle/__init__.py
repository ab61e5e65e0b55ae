"""Fast start at scale: tiered environment bundles, broadcast to node-local storage,
and an interpreter rerouted to the local copy (after python-mpi-bcast, Feng et al. 2016).

``build`` makes the bundles, ``deliver`` puts them on every node (``deliver_via_agents``
through a running runtime's agents), ``rerouted_environ``
gives the environment that runs Python from the copy, ``cleanup`` removes it.
"""

from __future__ import annotations

from .agents import cleanup_via_agents, deliver_via_agents
from .archive import BundleError, StreamUnpacker, expected_digest
from .env import python_executable, rerouted_environ, shell_exports
from .install import UnpackReport, cleanup, staged_install, unpack_bundles
from .report import DeliveryReport
from .tiers import BuildResult, build
from .transport import deliver, register_agent_transport

__all__ = [
    "BuildResult",
    "BundleError",
    "DeliveryReport",
    "StreamUnpacker",
    "UnpackReport",
    "build",
    "cleanup",
    "cleanup_via_agents",
    "deliver",
    "deliver_via_agents",
    "expected_digest",
    "python_executable",
    "register_agent_transport",
    "rerouted_environ",
    "shell_exports",
    "staged_install",
    "unpack_bundles",
]
