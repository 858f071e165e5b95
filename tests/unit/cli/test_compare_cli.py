"""``orchestrator compare RESULTS BASELINE``: outputs, console summary, and errors naming the file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.eval_results_factory import results, trials_units
from typer.testing import CliRunner

from orchestrator.cli.main import app
from orchestrator.errors import UserError
from orchestrator.results.model import EvalResults


def _write(path: Path, res: EvalResults) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(res.model_dump_json(indent=2))
    return path


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    pr = _write(tmp_path / "pr" / "eval-results.json",
                results("pr-run", trials_units("form", "happy", 0, 3) + trials_units("dedupe", "s", 3, 3)))
    base = _write(tmp_path / "base" / "eval-results.json",
                  results("base-run", trials_units("form", "happy", 3, 3) + trials_units("dedupe", "s", 3, 3)))
    return pr, base


def test_compare_writes_comment_and_comparison(pair: tuple[Path, Path], tmp_path: Path) -> None:
    pr, base = pair
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["compare", str(pr), str(base), "--output-dir", str(out)])
    assert result.exit_code == 0, result.output
    assert "1 hard regression(s)" in result.output and "form/happy" in result.output
    comment = (out / "eval-pr-comment.md").read_text()
    assert "🔴 **1 hard regression(s)** vs baseline `base-run`" in comment
    data = json.loads((out / "comparison.json").read_text())
    assert data["baseline"] == {"experimentName": "base-run"}
    assert data["orchestrator"]["verdictCounts"]["hard_regression"] == 1
    units = {u["key"]: u for u in data["evaluationUnits"]}
    assert units["form/happy"]["verdict"] == "hard_regression"
    assert units["form/happy"]["pValueLeft"] == pytest.approx(0.05)
    assert units["form/happy"]["qValueLeft"] == pytest.approx(0.10)
    assert units["dedupe/s"]["verdict"] == "stable"


def test_default_output_dir_is_the_results_folder(pair: tuple[Path, Path]) -> None:
    pr, base = pair
    result = CliRunner().invoke(app, ["compare", str(pr), str(base)])
    assert result.exit_code == 0, result.output
    assert (pr.parent / "eval-pr-comment.md").is_file() and (pr.parent / "comparison.json").is_file()


def test_missing_and_invalid_files_name_the_file(pair: tuple[Path, Path], tmp_path: Path) -> None:
    pr, base = pair
    missing = tmp_path / "nope.json"
    result = CliRunner().invoke(app, ["compare", str(missing), str(base)])
    assert isinstance(result.exception, UserError) and str(missing) in str(result.exception)

    not_json = tmp_path / "broken.json"
    not_json.write_text("{not json")
    result = CliRunner().invoke(app, ["compare", str(pr), str(not_json)])
    assert isinstance(result.exception, UserError)
    assert "BASELINE" in str(result.exception) and str(not_json) in str(result.exception)

    wrong_shape = tmp_path / "other.json"
    wrong_shape.write_text(json.dumps({"run_id": "x"}))
    result = CliRunner().invoke(app, ["compare", str(wrong_shape), str(base)])
    assert isinstance(result.exception, UserError)
    assert str(wrong_shape) in str(result.exception) and "started_at" in str(result.exception)

    odd_reference = tmp_path / "odd.json"  # n8n's shape, a scenario run that is not an object
    odd_reference.write_text(json.dumps({"testCases": [{"scenarios": [{"name": "s", "runs": ["x"]}]}]}))
    result = CliRunner().invoke(app, ["compare", str(pr), str(odd_reference)])
    assert isinstance(result.exception, UserError)
    assert str(odd_reference) in str(result.exception) and "testCases" in str(result.exception)


def test_cli_prints_one_line_error_and_exits_2(tmp_path: Path, pair: tuple[Path, Path]) -> None:
    _, base = pair
    missing = tmp_path / "missing-results.json"
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "compare", str(missing), str(base)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: RESULTS file not found: {missing}"
