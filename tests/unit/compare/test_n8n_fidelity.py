"""Aggregates, comparison and contract as n8n's harness computes and reads them (issue 23, item 4).
Each test names the n8n file and function whose rule it follows."""

from __future__ import annotations

import json

import pytest
from support.eval_results_factory import results, trials_units, unit
from support.n8n_reader import N8nParseError, bucket_from_results_json

from orchestrator.compare.comparison import KNOWN_FAILURE_CATEGORIES, compare, comparison_dict, locale_key
from orchestrator.compare.gate import evaluate_gate
from orchestrator.compare.load import load_results
from orchestrator.results.contract import from_document, to_document
from orchestrator.results.model import BuildStatus
from orchestrator.results.scoring import scoring_units, wilson_band


def _mixed_run():
    units = [unit("alpha", 0, {"s": True, "t": (False, "mock_issue")}, {"e": True}),
             unit("alpha", 1, {"s": False, "t": None}, {"e": None}),
             unit("alpha", 2, status=BuildStatus.failed, failure_category="build_failure"),
             unit("beta", 0, {}, {"only": True}),
             unit("beta", 1, status=BuildStatus.timeout)]
    units[0].build.thread_id = "3f0c9a2e-8d41-4b77-9a10-1c2d3e4f5a6b"
    res = results("run-x", units, k=3)
    res.config["iterations"] = 3
    return res


def test_n8n_reader_accepts_our_file_and_counts_as_we_do() -> None:
    """n8n's ``comparison/bucket-from-results-json.ts`` (``parseEvalResults``,
    ``bucketFromResultsJson``): every field it reads has its type (optional strings absent, never
    null), and the units it buckets are ours with the same (passed, total)."""
    res = _mixed_run()
    doc = json.loads(json.dumps(to_document(res)))
    units, categories, trials = bucket_from_results_json(doc)
    ours = {k: (su.c, su.n) for k, su in scoring_units(res.units).items() if su.n}
    assert units == ours
    assert categories == {"mock_issue": 1, "build_failure": 2}
    assert trials == sum(su.n for su in scoring_units(res.units).values() if su.kind == "scenario")


def test_a_null_optional_string_is_what_n8n_rejects() -> None:
    """n8n's ``bucket-from-results-json.ts``: ``failureCategory: z.string().optional()`` refuses null
    — the reason our writer leaves unset optional strings out."""
    with pytest.raises(N8nParseError, match="failureCategory"):
        bucket_from_results_json({"testCases": [{"testCaseFile": "a", "scenarios": [
            {"name": "s", "passCount": 1, "evaluatedCount": 1, "runs": [{"passed": True, "failureCategory": None}]}]}]})
    run = to_document(_mixed_run())["testCases"][0]["scenarios"][0]["runs"][0]
    assert run["passed"] is True and not {"failureCategory", "rootCause", "attribution"} & set(run)


def test_thread_ids_are_carried() -> None:
    """n8n's ``run/persist.ts`` ``writeEvalResults``: ``threadIds`` has one entry per iteration, the
    build's thread id or null (the dispatcher contract test pins it)."""
    tc = {t["testCaseFile"]: t for t in to_document(_mixed_run())["testCases"]}["alpha"]
    assert tc["threadIds"] == ["3f0c9a2e-8d41-4b77-9a10-1c2d3e4f5a6b", None, None]


def test_headline_pass_hat_k_is_the_plug_in_and_the_unbiased_one_an_extra() -> None:
    """n8n's ``run/persist.ts`` ``computeAggregateMetrics`` / ``terminalRate`` and
    ``run/aggregator.ts`` ``passHatK``: the summary is the mean over units with a verdict of
    (c/n)^n; ours alone, ``passHatKUnbiased``, is C(c,k)/C(n,k) and never the headline."""
    doc = to_document(_mixed_run())
    ours = [su for su in scoring_units(_mixed_run().units).values() if su.n]
    assert doc["summary"]["passHatK"] == pytest.approx(sum((su.c / su.n) ** su.n for su in ours) / len(ours))
    assert doc["summary"]["passAtK"] == pytest.approx(sum(su.c > 0 for su in ours) / len(ours))
    s = {x["name"]: x for x in doc["testCases"][0]["scenarios"]}["s"]
    assert (s["passCount"], s["evaluatedCount"]) == (1, 3)
    assert s["passHatK"] == pytest.approx(1 / 27) and s["passHatKUnbiased"] == 0.0


def test_aggregate_band_is_over_the_shared_units_only() -> None:
    """n8n's ``comparison/compare.ts`` ``compareBuckets``: the aggregate pass rate and its Wilson
    band (``statistics.ts`` ``wilsonInterval``) are over the intersection; units one side lacks do
    not move it. Our all-units rate stays an extra."""
    pr = results("pr", trials_units("a", "s", 2, 4) + trials_units("new", "s", 0, 10))
    base = results("base", trials_units("a", "s", 4, 4) + trials_units("gone", "s", 10, 10))
    c = comparison_dict(compare(pr, base))
    agg = c["aggregate"]
    assert agg["intersectionSize"] == 1
    assert agg["prAggregatePassRate"] == 0.5 and agg["baselineAggregatePassRate"] == 1.0 and agg["delta"] == -0.5
    band = wilson_band(2, 4)
    assert agg["prAggregateCI"] == {"lower": band.low, "upper": band.high}
    assert c["orchestrator"]["prPassRateAllUnits"]["rate"] == pytest.approx(2 / 14)
    assert [u["name"] for u in c["prOnly"]] == ["s"] and c["prOnly"][0]["testCaseFile"] == "new"


def test_failure_category_table_is_n8ns() -> None:
    """n8n's ``comparison/compare.ts`` ``compareFailureCategories``: a row for every known
    category (0/0 too), unknown ones left out, notable first then by |delta|."""
    pr = results("pr", trials_units("a", "s", 10, 20, category="mock_issue")
                 + trials_units("b", "s", 19, 20, category="made_up"))
    base = results("base", trials_units("a", "s", 20, 20) + trials_units("b", "s", 20, 20))
    rows = comparison_dict(compare(pr, base))["failureCategories"]
    assert [r["category"] for r in rows][0] == "mock_issue"
    assert {r["category"] for r in rows} == set(KNOWN_FAILURE_CATEGORIES)
    top = rows[0]
    assert (top["prCount"], top["baselineCount"], top["notable"]) == (10, 0, True)
    assert top["prRate"] == 10 / 40 and top["delta"] == 10 / 40


def test_units_are_listed_in_n8ns_order() -> None:
    """n8n's ``comparison/compare.ts`` ``unitComparator``: verdict order (hard, soft, improvement,
    watch, unreliable, stable, insufficient), then case, scenarios before expectations, then name."""
    pr = results("pr", trials_units("z", "s", 0, 3) + trials_units("a", "s", 3, 3) + trials_units("m", "s", 3, 3)
                 + [unit("a", 0, {}, {"exp": True})])
    base = results("base", trials_units("z", "s", 3, 3) + trials_units("a", "s", 3, 3) + trials_units("m", "s", 0, 3)
                   + [unit("a", 0, {}, {"exp": True})])
    keys = [u["key"] for u in comparison_dict(compare(pr, base))["evaluationUnits"]]
    assert keys == ["z/s", "m/s", "a/s", "a#expectation:exp"]


#: Sorted by Node 24's ``localeCompare`` (ICU, en-US): ``xs.sort((a, b) => a.localeCompare(b))``.
NODE_LOCALE_ORDER = ["#hashtag", "~tilde", "$dollar", "a/b", "a\\b", "alpha", "Alpha", "ALPHA", "alpha_beta",
                     "alpha-beta", "alpha.beta", "alphabeta", "emile", "Emile", "émile", "It totals (the) order",
                     "it totals the order", "It totals the order", "smoke manual", "smoke_manual", "smoke-1",
                     "Smoke-manual", "smoke-manual-set", "smoke10", "smoke2", "x-1y", "x1y", "X1Y", "Zeta case"]


def test_case_and_unit_names_are_ordered_by_locale_compare_not_code_points() -> None:
    """n8n's ``comparison/compare.ts`` ``unitComparator`` sorts by ``testCaseFile.localeCompare`` and
    ``name.localeCompare`` (commit 2dd7f368): punctuation before digits before letters, case and
    accents only breaking ties — not code points ("Zeta" before "alpha")."""
    assert sorted(reversed(NODE_LOCALE_ORDER), key=locale_key) == NODE_LOCALE_ORDER
    pr = results("pr", trials_units("Zeta", "s", 3, 3) + trials_units("alpha", "B step", 3, 3)
                 + trials_units("alpha", "a step", 3, 3))
    keys = [u["key"] for u in comparison_dict(compare(pr, pr))["evaluationUnits"]]
    assert keys == ["alpha/a step", "alpha/B step", "Zeta/s"]


def test_the_pr_tier_gate() -> None:
    """n8n's ``comparison/gate.ts`` ``evaluateGate`` (criterion ``passAtK``): a unit is green when
    it passed at least once, units without a verdict are excluded, the run is green when no gated
    unit is red; slugs ``<case>/<scenario>`` and ``<case> :: <expectation[:60]>``."""
    res = _mixed_run()
    res.config["tier"] = "pr"
    doc = to_document(res)
    gate = doc["gate"]
    assert gate["criterion"] == {"kind": "passAtK"} and gate["totalRuns"] == 3
    by_slug = {u["slug"]: u for u in gate["units"]}
    assert by_slug["alpha/s"]["green"] is True and by_slug["alpha/t"]["green"] is False
    assert by_slug["alpha/t"]["failureCategories"] == {"mock_issue": 1, "build_failure": 1}
    assert "alpha :: e" in by_slug and gate["green"] is False
    assert [u["slug"] for u in gate["failing"]] == ["alpha/t"]
    assert gate == evaluate_gate(doc["testCases"], 3)
    res.config["tier"] = "smoke"
    assert "gate" not in to_document(res)


def test_n8n_file_with_counts_only_is_read_with_its_counts(tmp_path) -> None:
    """n8n's ``bucket-from-results-json.ts``: ``runs`` defaults to empty and the unit counts are
    ``passCount`` / ``evaluatedCount``; an unevaluated expectation is no unit."""
    doc = {"timestamp": "2026-11-30T00:00:00Z", "totalRuns": 3, "testCases": [
        {"testCaseFile": "a", "scenarios": [{"name": "s", "passCount": 2, "evaluatedCount": 3}],
         "buildExpectations": [{"expectation": "e", "passCount": 3, "evaluatedCount": 3},
                               {"expectation": "never", "passCount": 0, "evaluatedCount": 0}]}]}
    path = tmp_path / "eval-results.json"
    path.write_text(json.dumps(doc))
    units = {k: (su.c, su.n) for k, su in scoring_units(load_results(path).units).items() if su.n}
    assert units == bucket_from_results_json(doc)[0] == {"a/s": (2, 3), "a#expectation:e": (3, 3)}
    assert from_document(doc).run_id == "reference"
