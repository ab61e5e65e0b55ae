"""The optional C part of shoal; pyproject.toml holds the metadata.

``shoal.agent._spawnc`` (the spawn helper's per-command path, issue 13) is built where a C
compiler and Python's headers exist; where the build fails, the install goes on without it
and shoal uses its pure-Python path (shoal.agent.launcher).
"""

import sys

from setuptools import Extension, setup

ext_modules = []
if sys.platform.startswith("linux"):  # clone, memfd_create: Linux only
    ext_modules.append(Extension("shoal.agent._spawnc", ["shoal/agent/_spawnc.c"],
                                 extra_compile_args=["-O2"], optional=True))

setup(ext_modules=ext_modules)
