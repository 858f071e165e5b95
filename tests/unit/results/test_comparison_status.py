"""``comparisonStatus`` in ``eval-results.json``: n8n's five values (``run/persist.ts``:
``comparisonStatus: outcome?.kind ?? 'not_attempted'``; ``run/langsmith-driver.ts``
``tryRunComparison``), with ``comparisonError`` only for ``fetch_failed`` and ``comparison`` only for
``ok`` (n8n omits both keys otherwise)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from support.eval_results_factory import results, trials_units

from orchestrator.results.model import ComparisonStatus, EvalResults
from orchestrator.results.writer import ResultsWriter
from orchestrator.run.finalize import write_final


def _final(tmp_path: Path, res: EvalResults, **kwargs: Any) -> tuple[dict[str, Any], list[str]]:
    writer = ResultsWriter(res, tmp_path / "out", tmp_path / "run")
    errors = write_final(res, writer, tmp_path / "out", **{"baseline_path": None, "hook_comparison": None,
                                                           "hook_baseline": None, **kwargs})
    return json.loads((tmp_path / "out" / "eval-results.json").read_text()), errors


def _run(tier: str | None = None) -> EvalResults:
    res = results("pr-run", trials_units("a", "s", 2, 3), k=3)
    if tier:
        res.config["tier"] = tier
    return res


def test_no_baseline_source_is_not_attempted(tmp_path: Path) -> None:
    doc, errors = _final(tmp_path, _run())
    assert doc["comparisonStatus"] == "not_attempted" and errors == []
    assert "comparison" not in doc and "comparisonError" not in doc


def test_a_baseline_file_compares_ok_and_an_unreadable_one_is_fetch_failed(tmp_path: Path) -> None:
    base = tmp_path / "base.json"
    base.write_text(results("base-run", trials_units("a", "s", 3, 3), k=3).model_dump_json())
    doc, _ = _final(tmp_path, _run(), baseline_path=base)
    assert doc["comparisonStatus"] == "ok" and doc["comparison"]["result"]["evaluationUnits"]
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    doc, errors = _final(tmp_path / "again", _run(), baseline_path=broken)
    assert doc["comparisonStatus"] == "fetch_failed" and "broken.json" in doc["comparisonError"]
    assert "comparison" not in doc and len(errors) == 1


def test_what_a_hook_found_is_recorded_and_a_gated_tier_is_not_attempted(tmp_path: Path) -> None:
    statuses: list[tuple[ComparisonStatus, str | None]] = [
        ("no_baseline", None), ("self_baseline", "This run is the baseline"), ("fetch_failed", "HTTP 503")]
    for index, hook_status in enumerate(statuses):
        doc, _ = _final(tmp_path / str(index), _run(), hook_status=hook_status)
        assert doc["comparisonStatus"] == hook_status[0]
        assert doc.get("comparisonError") == (hook_status[1] if hook_status[0] == "fetch_failed" else None)
    doc, _ = _final(tmp_path / "gated", _run(tier="pr"), hook_status=("fetch_failed", "HTTP 503"))
    assert doc["comparisonStatus"] == "not_attempted" and "gate" in doc
