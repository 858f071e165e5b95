"""eval-pr-comment.md: alert line, sections, escaping, redaction, no-baseline variant."""

from __future__ import annotations

import re
from pathlib import Path

from support.eval_results_factory import results, trials_units, unit

from orchestrator.compare.comparison import compare
from orchestrator.compare.pr_comment import FILENAME, MAX_FAILURES, render_pr_comment, write_pr_comment
from orchestrator.redact import MASK, register_secret


def _tables(text: str) -> list[list[str]]:
    tables: list[list[str]] = []
    current: list[str] = []
    for line in text.splitlines():
        if line.startswith("|"):
            current.append(line)
        elif current:
            tables.append(current)
            current = []
    return tables + ([current] if current else [])


def _columns(row: str) -> int:
    return len(re.findall(r"(?<!\\)\|", row)) - 1


def _pair(pr_units: list, base_units: list) -> tuple:
    pr, base = results("pr-run", pr_units, experiment="nightly"), results("base-run", base_units)
    return pr, base, compare(pr, base)


def test_regression_alert_and_tables() -> None:
    pr, base, comparison = _pair(
        trials_units("contact-form", "happy path", 0, 3) + trials_units("dedupe", "s", 3, 3),
        trials_units("contact-form", "happy path", 3, 3) + trials_units("dedupe", "s", 3, 3),
    )
    text = render_pr_comment(pr, comparison, base)
    first = [line for line in text.splitlines() if line.strip()][1]
    assert first.startswith("🔴 **1 hard regression(s)** vs baseline `base-run`")
    # BH over two units (p = 1/20 and 1): q = 0.05·2/1 = 0.10 > 0.05, so the raw regression does not survive
    assert "(0 survive Benjamini–Hochberg)" in first
    assert "| 0.05 | 0.1 | soft_regression |" in text
    assert "#### Hard regressions (1)" in text
    assert "| contact-form/happy path | scenario | 0/3 (0.0%) | 3/3 (100.0%) | -100 pts |" in text
    assert "| Pass rate | 50.0% (3/6), 95% CI" in text
    assert "| contact-form | 3 | 0.0% | 0.0% | 0/3 |" in text
    assert text.count("- **contact-form** #") == 3
    for table in _tables(text):
        assert len({_columns(row) for row in table}) == 1, table


def test_no_regression_and_likely_alerts() -> None:
    pr, base, same = _pair(trials_units("a", "s", 3, 3), trials_units("a", "s", 3, 3))
    assert "🟢 **No regressions** vs baseline `base-run`" in render_pr_comment(pr, same, base)

    pr, base, likely = _pair(trials_units("a", "s", 0, 1), trials_units("a", "s", 4, 4))  # p = 1/5
    text = render_pr_comment(pr, likely, base)
    assert "🟠 **1 soft regression(s)**" in text
    assert "#### Soft regressions (1)" in text and "#### Hard regressions" not in text


def test_drift_table_and_one_sided_units() -> None:
    pr_units = trials_units("a", "s", 0, 20, category="mock_generation") + trials_units("new", "s", 1, 1)
    base_units = trials_units("a", "s", 20, 20) + trials_units("gone", "s", 1, 1)
    pr, base, comparison = _pair(pr_units, base_units)
    text = render_pr_comment(pr, comparison, base)
    assert "### Failure-category drift" in text
    assert "| mock_generation | 20/21 (95.2%) | 0/21 (0.0%) | +95.2 pts | +20.0 | ⚠️ yes |" in text
    assert "Only in this run (1)" in text and "- new/s" in text
    assert "Only in the baseline (1)" in text and "- gone/s" in text


def test_no_baseline_variant() -> None:
    pr = results("pr-run", trials_units("a", "s", 2, 3), k=2)
    text = render_pr_comment(pr, None, no_baseline_reason="no baseline run was given")
    assert "ℹ️ **No baseline comparison** — no baseline run was given." in text
    assert "| | This run |" in text and "Baseline |" not in text
    assert "### Comparison" not in text
    # n8n's headline (run/persist.ts): terminal k = n = 3 → pass@3 = 1 ; pass^3 = (2/3)^3 = 29.6%
    assert "| pass@2 | 100.0% |" in text and "| pass^2 | 29.6% |" in text
    assert "| a | 3 | 100.0% | 29.6% | 2/3 |" in text


def test_the_heading_is_n8ns_and_each_comparison_status_has_its_own_alert() -> None:
    """n8n ``comparison/format.ts`` (pinned by ``__tests__/comparison-format.test.ts`` @ 012ffedc:
    "omits commit SHA from the PR-comment heading", "renders distinct alerts per skip reason"): the
    heading readers key on is ``### Instance AI Workflow Eval``; no_baseline, self_baseline and
    fetch_failed each say why nothing was compared, fetch_failed as a warning."""
    pr = results("pr-run", trials_units("a", "s", 2, 3), k=2)
    assert render_pr_comment(pr, None).startswith("### Instance AI Workflow Eval\n")
    pr.comparison_status = "no_baseline"
    assert "`--experiment-name instance-ai-baseline` on master to create one" in render_pr_comment(pr, None)
    pr.comparison_status, pr.experiment_name = "self_baseline", "instance-ai-baseline-1"
    assert "this run is the baseline (`instance-ai-baseline-1`) — nothing to compare against" in render_pr_comment(pr, None)
    pr.comparison_status, pr.comparison_error = "fetch_failed", "HTTP 503"
    text = render_pr_comment(pr, None)
    assert "⚠️ **Regression detection did not run — baseline fetch failed: HTTP 503**" in text


def test_escaping_and_redaction(tmp_path: Path) -> None:
    secret = "mcp-token-Zq81x7Lw0PpA"
    register_secret(secret)
    units = [
        unit("pipes|case", 0, {"a|b": False}, {"Sends <script>alert(1)</script> mail": False},
             reason=f"401 from n8n with token {secret}\nsecond line"),
    ]
    passing = [unit("pipes|case", 0, {"a|b": True}, {"Sends <script>alert(1)</script> mail": True})]
    pr, base, comparison = _pair(units, passing)
    text = render_pr_comment(pr, comparison, base)
    assert secret not in text and MASK in text
    assert "<script>" not in text and "&lt;script&gt;" in text
    assert "pipes\\|case/a\\|b" in text
    for table in _tables(text):
        assert len({_columns(row) for row in table}) == 1, table
    path = write_pr_comment(tmp_path, text + secret)
    assert path.name == FILENAME and secret not in path.read_text()


def test_failures_list_is_capped() -> None:
    pr = results("pr-run", trials_units("a", "s", 0, MAX_FAILURES + 7))
    text = render_pr_comment(pr, None)
    assert f"<summary>{MAX_FAILURES + 7} failure(s)</summary>" in text
    assert text.count("- **a** #") == MAX_FAILURES
    assert "… and 7 more" in text


def test_workflow_checks_table_per_check_by_dimension() -> None:
    from orchestrator.results.model import StructuralCheck

    units = [unit("c", i, {"s": True}) for i in range(3)]
    for i, u in enumerate(units):
        u.structural = [
            StructuralCheck(name="has_trigger", passed=True, dimension="structure"),
            StructuralCheck(name="no_hardcoded_credentials", passed=i != 0, dimension="security"),
            StructuralCheck(name="agent_has_language_model", passed=None, dimension="ai_nodes"),
        ]
    text = render_pr_comment(results("r", units, k=3))
    assert "### Workflow checks" in text and "3 checks over 3 build(s)" in text
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    assert "| structure | `has_trigger` | 3 | 0 | 0 | 100.0% |" in lines
    assert "| security | `no_hardcoded_credentials` | 2 | 1 | 0 | 66.7% |" in lines
    assert "| ai_nodes | `agent_has_language_model` | 0 | 0 | 3 | — |" in lines
    order = [line.split("|")[1].strip() for line in lines if "`" in line]
    assert order == ["structure", "ai_nodes", "security"]  # rubric order


def test_no_checks_no_table() -> None:
    assert "Workflow checks" not in render_pr_comment(results("r", [unit("c", 0, {"s": True})]))
