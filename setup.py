"""The optional C part of shoal; pyproject.toml holds the metadata.

Built where a C compiler and Python's headers exist; where a build fails, the install goes
on without it and shoal uses its pure-Python path:

- ``shoal.agent._spawnc``: the spawn helper's per-command path (issue 13), else
  shoal.agent.launcher's ``os.posix_spawn``;
- ``shoal._proc``: the parent-death signal and the command-line rewrite every process of
  the local runtime makes at its start, else ctypes (~3 ms of a cold start; shoal._sys).
"""

import sys

from setuptools import Extension, setup

ext_modules = []
if sys.platform.startswith("linux"):  # clone, memfd_create: Linux only
    ext_modules.append(Extension("shoal.agent._spawnc", ["shoal/agent/_spawnc.c"],
                                 extra_compile_args=["-O2"], optional=True))
    ext_modules.append(Extension("shoal._proc", ["shoal/_proc.c"],  # prctl: Linux only
                                 extra_compile_args=["-O2"], optional=True))

setup(ext_modules=ext_modules)
