"""What the terminal shows of a run: one line per finished unit, a grouped summary at the end.

Plain aligned text (no markdown): the PR comment has the same data for GitHub. A unit line reads

    ✗ contact-form #1  lane s0  build ok 95s · verify 40s  happy-path FAIL [builder_issue] · empty PASS

``--verbose`` adds timing and the build's error / root cause on a second line.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from orchestrator.domain import BuildStatus, Verdict
from orchestrator.redact import redact
from orchestrator.results.model import EvalResults, UnitResult
from orchestrator.results.scoring import UNSCORED_BUILDS, UnitOutcome, unit_outcome

_MARK = {UnitOutcome.passed: "✓", UnitOutcome.failed: "✗", UnitOutcome.incomplete: "·",
         UnitOutcome.build_failed: "✗", UnitOutcome.build_timeout: "⌛", UnitOutcome.provider_outage: "!",
         UnitOutcome.lane_failure: "!", UnitOutcome.skipped: "-"}


def _verdicts(unit: UnitResult) -> str:
    parts = []
    for s in unit.scenarios:
        word = {Verdict.passed: "PASS", Verdict.failed: "FAIL"}.get(s.verdict, "N/A")
        tag = f" [{s.failure_category}]" if s.verdict is Verdict.failed and s.failure_category else ""
        parts.append(f"{s.name} {word}{tag}")
    judged = [e for e in unit.expectations if e.verdict is not Verdict.incomplete]
    if judged:
        ok = sum(1 for e in judged if e.verdict is Verdict.passed)
        parts.append(f"expectations {ok}/{len(judged)}" + ("" if ok == len(judged) else " [expectations_failed]"))
    return " · ".join(parts)


def unit_line(unit: UnitResult, *, verbose: bool = False) -> str:
    """One line (two with ``verbose``) for a finished unit: case, iteration, lane, verdicts."""
    outcome = unit_outcome(unit)
    build = unit.build.status.value
    if unit.build.status is BuildStatus.timeout:
        build += " (neutral: not scored)"
    elif unit.build.status is not BuildStatus.ok and unit.failure_category:
        build += f" [{unit.failure_category}]"
    line = f"{_MARK[outcome]} {unit.case} #{unit.iteration}  lane {unit.lane or '—'}  build {build}"
    if verbose:
        line += f" {unit.build.duration_s:.0f}s · verify {unit.verify_duration_s:.0f}s · ${unit.build.cost_usd:.2f}"
    verdicts = _verdicts(unit)
    if verdicts:
        line += f"  {verdicts}"
    if verbose and (unit.build.error or unit.build.root_cause):
        line += f"\n    {unit.build.error or unit.build.root_cause}"
    return redact(line)


def summary_lines(results: EvalResults) -> list[str]:
    """The grouped summary: outcomes, failures by category and by case, checks that failed."""
    units = results.units
    if not units:
        return ["no unit finished"]
    outcomes = Counter(unit_outcome(u).value for u in units)
    out = ["outcomes: " + ", ".join(f"{n} {k}" for k, n in outcomes.most_common())]
    by_category: dict[str, list[str]] = defaultdict(list)
    for u in sorted(units, key=lambda u: (u.case, u.iteration)):
        if u.build.status in UNSCORED_BUILDS:  # timeout, outage, lane failure, skipped: neutral
            continue
        for s in u.scenarios:
            if s.verdict is Verdict.failed:
                by_category[s.failure_category or "uncategorised"].append(f"{u.case}/{s.name} #{u.iteration}")
        if any(e.verdict is Verdict.failed for e in u.expectations) and u.build.status is BuildStatus.ok:
            by_category["expectations_failed"].append(f"{u.case} #{u.iteration}")
        if u.build.status is BuildStatus.failed and not u.scenarios:
            by_category[u.failure_category or u.build.status.value].append(f"{u.case} #{u.iteration}")
    if by_category:
        out.append("failures by category:")
        width = max(len(c) for c in by_category)
        for category, where in sorted(by_category.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            shown = ", ".join(where[:6]) + (f" … +{len(where) - 6}" if len(where) > 6 else "")
            out.append(f"  {category:<{width}}  {len(where):>3}  {shown}")
    per_case: dict[str, list[UnitResult]] = defaultdict(list)
    for u in units:
        per_case[u.case].append(u)
    out.append("per case:")
    width = max(len(c) for c in per_case)
    for case in sorted(per_case):
        cu = per_case[case]
        scored = [u for u in cu if u.build.status not in UNSCORED_BUILDS]
        verdicts = [s.verdict for u in scored for s in u.scenarios] + [e.verdict for u in scored for e in u.expectations]
        trials = [v for v in verdicts if v is not Verdict.incomplete]
        passed = sum(1 for v in trials if v is Verdict.passed)
        marks = "".join(_MARK[unit_outcome(u)] for u in sorted(cu, key=lambda u: u.iteration))
        out.append(f"  {case:<{width}}  {marks:<6} {passed}/{len(trials)} trials passed")
    failing_checks = Counter(c.name for u in units for c in u.structural if c.status == "fail")
    if failing_checks:
        out.append("workflow checks failing: " + ", ".join(f"{n} ×{k}" for n, k in failing_checks.most_common(8)))
    return [redact(line) for line in out]


