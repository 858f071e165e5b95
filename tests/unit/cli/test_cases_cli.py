"""``orchestrator cases list|validate`` driven through typer's runner and as a real process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from orchestrator.cli.cases_cmd import app

ROOT = Path(__file__).resolve().parents[3]
CORPUS = ROOT / "cases"
INVALID = ROOT / "tests" / "fixtures" / "invalid"
runner = CliRunner()


def test_validate_corpus_exits_zero() -> None:
    result = runner.invoke(app, ["validate", str(CORPUS)])
    assert result.exit_code == 0, result.output
    count = len(list(CORPUS.glob("*.json")))
    assert f"{count} file(s) checked: {count} valid, 0 invalid (0 error(s))" in result.output


def test_validate_reports_every_invalid_file_one_line_per_error() -> None:
    result = runner.invoke(app, ["validate", str(INVALID)])
    assert result.exit_code == 1
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    files = sorted(INVALID.glob("*.json"))
    for path in files:
        assert f"{path}: " in result.output, path.name
    error_lines = [line for line in result.output.splitlines() if line.startswith(str(INVALID))]
    assert all(line.count(": ") >= 2 for line in error_lines)
    assert f"{INVALID / 'folder-cycle.json'}: seed.folders.0.parentFolderId: " in result.output
    assert f"{INVALID / 'bad-json-syntax.json'}: <json>: Expecting ',' delimiter (line 4, column 3)" in result.output
    summary = result.output.strip().splitlines()[-1]
    assert summary == f"{len(files)} file(s) checked: 0 valid, {len(files)} invalid ({len(error_lines)} error(s))"


def test_validate_mixed_files_counts_both(tmp_path: Path) -> None:
    good = CORPUS / "smoke-manual-set-static-fields.json"
    bad = tmp_path / "broken.json"
    bad.write_text(json.dumps({"complexity": "simple", "tags": []}))
    result = runner.invoke(app, ["validate", str(good), str(bad)])
    assert result.exit_code == 1
    assert f"{bad}: conversation: a case needs a conversation" in result.output
    assert f"{bad}: (case): a case needs at least one executionScenario" in result.output
    assert "2 file(s) checked: 1 valid, 1 invalid (2 error(s))" in result.output


def test_validate_requires_a_path() -> None:
    result = runner.invoke(app, ["validate"])
    assert result.exit_code == 2


def test_list_shows_the_selected_cases() -> None:
    result = runner.invoke(app, ["list", str(CORPUS), "--tier", "smoke", "--exclude", "filter"])
    assert result.exit_code == 0, result.output
    assert "smoke-manual-set-static-fields" in result.output
    assert "smoke-manual-filter-adults" not in result.output
    assert "build-webhook-feedback-to-slack" not in result.output
    smoke = [p for p in CORPUS.glob("smoke-*.json") if "filter" not in p.stem]
    assert f"{len(smoke)} case(s)" in result.output


def test_list_columns_count_scenarios_and_expectations(tmp_path: Path) -> None:
    case = {
        "conversation": [{"role": "user", "text": "hi"}],
        "complexity": "medium",
        "tags": ["alpha", "beta"],
        "datasets": ["pr", "full"],
        "executionScenarios": [{"name": "a", "description": "", "dataSetup": "", "successCriteria": "ok"}] * 2,
        "processExpectations": ["p"],
        "outcomeExpectations": ["o1", "o2"],
    }
    (tmp_path / "table-case.json").write_text(json.dumps(case))
    result = runner.invoke(app, ["list", str(tmp_path)])
    assert result.exit_code == 0, result.output
    row = next(line for line in result.output.splitlines() if "table-case" in line)
    cells = [cell.strip() for cell in row.strip("│ ").split("│")]
    assert cells == ["table-case", "medium", "alpha, beta", "pr, full", "-", "2", "3"]


def test_list_with_invalid_cases_prints_issues_and_exits_one(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("[]")
    result = runner.invoke(app, ["list", str(tmp_path)])
    assert result.exit_code == 1
    assert f"{tmp_path / 'bad.json'}: (case): a case must be a JSON object" in result.output


def test_list_bad_flag_combination_is_one_line_error() -> None:
    result = runner.invoke(app, ["list", "--source", "langtracer"])
    assert result.exit_code == 2
    assert result.output.strip() == "error: --suite is required with --source langtracer"


def test_installed_entry_point_reports_without_traceback() -> None:
    entry_point = Path(sys.executable).parent / "orchestrator"
    done = subprocess.run(
        [str(entry_point), "cases", "validate", str(INVALID), str(ROOT / "no-such-dir")],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stdout + done.stderr
    assert f"{ROOT / 'no-such-dir'}: <file>: no such file or directory" in done.stdout
    for path in INVALID.glob("*.json"):
        assert str(path) in done.stdout
