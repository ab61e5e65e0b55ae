"""shoal serve: the HTTP service for scripts and the sandbox its jobs run in."""
