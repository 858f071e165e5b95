"""Fault tests: real lanes and the real claude CLI under injected faults (see conftest.py)."""
