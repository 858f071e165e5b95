"""The console: one line per finished unit and a grouped summary."""

from __future__ import annotations

from support.eval_results_factory import results, unit

from orchestrator.results.console import summary_lines, unit_line
from orchestrator.results.model import Attribution, BuildStatus, StructuralCheck


def test_unit_line_names_case_iteration_lane_and_tagged_verdicts() -> None:
    u = unit("contact-form", 2, {"happy": (False, "builder_issue"), "empty": True}, {"Uses Slack": False},
             lane="s0")
    line = unit_line(u)
    assert line.startswith("✗ contact-form #2  lane s0  build ok")
    assert "happy FAIL [builder_issue]" in line and "empty PASS" in line
    assert "expectations 0/1 [expectations_failed]" in line
    assert "\n" not in line


def test_failed_build_line_and_verbose_timing() -> None:
    u = unit("slow", 0, status=BuildStatus.timeout, failure_category="build_failure",
             attribution=Attribution.builder_issue)
    u.build.error = "build timed out after 1800 s"
    assert "build timeout (neutral: not scored)" in unit_line(u)
    verbose = unit_line(u, verbose=True)
    assert "verify 30s" in verbose and verbose.endswith("build timed out after 1800 s")


def test_summary_groups_failures_by_category_and_case() -> None:
    units = [unit("a", i, {"s": (False, "mock_issue") if i else True}) for i in range(3)]
    units.append(unit("b", 0, {"t": (False, "builder_issue")}))
    units[0].structural = [StructuralCheck(name="has_trigger", passed=False, dimension="structure")]
    lines = summary_lines(results("r", units, k=1))
    text = "\n".join(lines)
    assert lines[0].startswith("outcomes: 3 failed, 1 passed")
    assert "mock_issue" in text and "a/s #1, a/s #2" in text and "b/t #0" in text
    assert any(line.strip().startswith("a ") and "1/3 trials passed" in line for line in lines)
    assert "workflow checks failing: has_trigger ×1" in text
