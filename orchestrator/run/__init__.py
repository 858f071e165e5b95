"""``orchestrator run``: its config and its stages (plan, provision, execute, teardown, finalize), wired in ``pipeline``."""
