"""``orchestrator build-check``: the seed's workflow-build harness (``eval:subagent``)."""

from orchestrator.harnesses.build_check.harness import CHECKS_EXPECTATION, build_check_stages, load_build_cases

__all__ = ["CHECKS_EXPECTATION", "build_check_stages", "load_build_cases"]
