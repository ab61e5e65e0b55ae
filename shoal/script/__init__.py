"""Shell-script compiler: an unmodified ``sh`` script of file-to-file tools -> a DAG of commands.

Pipeline: :mod:`.parser` (tree-sitter-bash) -> :mod:`.interp` (static interpretation against a
simulated file system) -> :mod:`.dag` (SSA-renamed file versions, read-after-write edges,
live-file analysis) -> :mod:`.cluster` (dispatch units) -> :mod:`.runner` (shoal or local threads).
"""

from __future__ import annotations

from .compiler import CompileOptions, Plan, compile_script
from .errors import ScriptError

__all__ = ["CompileOptions", "Plan", "ScriptError", "compile_script"]
