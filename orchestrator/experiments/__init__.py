"""Experiments on top of the run pipeline: LangSmith experiment sync (``langsmith_sync``) and model /
lane-env A/B runs with their side-by-side report (``ab``, ``ab_report``, ``mcnemar``)."""
