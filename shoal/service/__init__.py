"""``shoal serve``: an HTTP service that runs shell scripts next to the data, each job in a
sandbox (``sandbox.py``), and returns only their results (see docs/serve.md)."""
