"""Failure scenario tests of issue 10: real heads, agents and clients, real faults.

harness.py holds the machinery (see its docstring); tasks.py the task functions the
workers import. Every test uses ``--heartbeat-timeout 2`` unless it is about the default,
and counts after the run: each task delivered once, run again only where an attempt was
lost, and no process left behind (checked for every test by the ``tracker`` fixture).
"""
