"""Names a package exports but imports on first use (PEP 562 module ``__getattr__``).

A process imports only what it touches: the head and the agent import ``shoal`` (the
package) without the client API, and the head ``shoal.trace.store`` without the trace
reader and report.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any


def attribute(package: str, name: str, where: Mapping[str, str], namespace: dict[str, Any]) -> Any:
    """``package.name`` from the module ``where[name]``, kept in ``namespace`` (the
    package's globals) so the next lookup does not come here; AttributeError as for any
    missing attribute otherwise."""
    module = where.get(name)
    if module is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    namespace[name] = value
    return value
