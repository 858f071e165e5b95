"""``orchestrator cases push``: the reference's ``eval:langtracer-push`` (cli/langtracer-push.ts,
langtracer/push.ts ``planPush``, langtracer/to-exported.ts) against a loopback LangTracer."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support.langtracer_suite import SuiteStore, langtracer_suite
from typer.testing import CliRunner

from orchestrator.cli.main import app

KEY = "lt_pushkey0123456789abcdef"


def body(text: str = "Build a manual workflow that returns 42.", **extra: Any) -> dict[str, Any]:
    return {"conversation": [{"role": "user", "text": text}], "complexity": "simple", "tags": ["t"],
            "outcomeExpectations": ["A Code node returns 42."], **extra}


@pytest.fixture
def suite(monkeypatch: pytest.MonkeyPatch) -> Any:
    with langtracer_suite() as store:
        store.suites[7] = "baseline"
        monkeypatch.setenv("LANGTRACER_URL", store.url)
        monkeypatch.setenv("LANGTRACER_API_KEY", KEY)
        yield store


def write(folder: Path, name: str, case: object) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text(case if isinstance(case, str) else json.dumps(case))


def push(folder: Path, *args: str) -> Any:
    return CliRunner().invoke(app, ["cases", "push", "--suite", "baseline", "--cases", str(folder), *args])


def test_create_update_unchanged_and_a_replay_seed_refused(suite: SuiteStore, tmp_path: Path) -> None:
    """planPush: missing → create, drifted → update, equal on the compared fields → unchanged;
    to-exported: a case the case-write API cannot hold is skipped with its reason."""
    cases = tmp_path / "cases"
    write(cases, "alpha", body())
    write(cases, "beta", body(datasets=["pr"]))
    write(cases, "gamma", body())
    write(cases, "replayed", {**body(), "seed": {"mode": "replay", "threadId": "thread-1"}})
    suite.add_case(7, "beta", {"conversation": [{"role": "user", "text": "an older wording"}], "evalComplexity": "simple"})
    result = push(cases, "--tier", "full")  # gamma/alpha/replayed (beta is only in pr)
    assert result.exit_code == 0, result.output
    assert "create    2  (alpha, gamma)" in result.output and "refused   replayed: a replay seed" in result.output
    assert sorted(c["name"] for c in suite.cases.values()) == ["alpha", "beta", "gamma"]
    assert all(auth == f"Bearer {KEY}" for _, _, auth in suite.requests)

    created = next(c["body"] for c in suite.cases.values() if c["name"] == "alpha")
    assert created["suiteId"] == 7 and created["evalComplexity"] == "simple" and created["evalTags"] == ["t"]
    assert created["setKind"] == "regression" and created["synthetic"] is True

    result = push(cases, "alpha", "beta", "gamma")
    assert result.exit_code == 0, result.output
    assert "update    1  (beta)" in result.output and "unchanged 2  (alpha, gamma)" in result.output
    assert suite.writes()[-1] == ("PATCH", "/api/v1/cases/100")
    result = push(cases, "alpha", "beta", "gamma")
    assert "unchanged 3" in result.output and len(suite.writes()) == 3  # converges: nothing more written


def test_dry_run_writes_nothing(suite: SuiteStore, tmp_path: Path) -> None:
    write(tmp_path, "alpha", body())
    result = push(tmp_path, "alpha", "--dry-run")
    assert result.exit_code == 0 and "dry run" in result.output and "create    1  (alpha)" in result.output
    assert suite.writes() == []


def test_validation_is_selective(suite: SuiteStore, tmp_path: Path) -> None:
    """README: exact slugs read only the named files; --filter parses only matching files and an
    invalid one is a warning; a named invalid file fails the push before anything is written."""
    write(tmp_path, "alpha", body())
    write(tmp_path, "alpine-broken", {"prompt": "old shape", "complexity": "simple", "tags": []})
    write(tmp_path, "zeta-broken", "{not json")
    result = push(tmp_path, "alpha")
    assert result.exit_code == 0 and "warning" not in result.output
    result = push(tmp_path, "--filter", "alp", "--dry-run")
    assert result.exit_code == 0 and "warning: skipped invalid file" in result.output and "zeta" not in result.output
    result = push(tmp_path, "alpine-broken")
    assert result.exit_code == 1 and "`prompt` is the first case shape" in result.output
    assert len(suite.writes()) == 1


def test_changed_selects_git_new_and_modified_files(suite: SuiteStore, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write(repo, "kept", body())
    git = ["git", "-C", str(repo), "-c", "user.email=t@t.invalid", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "init"], check=True)
    write(repo, "fresh", body())
    result = push(repo, "--changed", "--dry-run")
    assert result.exit_code == 0 and "create    1  (fresh)" in result.output


def test_a_selector_is_required_and_an_unknown_suite_is_named(suite: SuiteStore, tmp_path: Path) -> None:
    write(tmp_path, "alpha", body())
    assert push(tmp_path).exit_code == 2
    result = CliRunner().invoke(app, ["cases", "push", "--suite", "nope", "--cases", str(tmp_path), "alpha"])
    assert result.exit_code == 2 and "'nope' not found" in result.output and "baseline" in result.output
