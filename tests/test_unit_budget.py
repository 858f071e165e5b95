"""One budget per stage: ``--build-timeout-ms`` bounds the build for every builder,
``--timeout-ms`` the verification; each is named so in ``--help``, in ``RunConfig`` and the README."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from orchestrator.builders.builder import get_builder
from orchestrator.cases import EvalCase
from orchestrator.cli.main import app
from orchestrator.run.config import RunConfig
from orchestrator.run.pipeline import build_timeout_ms
from orchestrator.run.unit import UnitRunner, UnitSettings

README = Path(__file__).resolve().parents[1] / "README.md"


def _help(*args: str) -> str:
    result = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", result.output).split())


def test_help_names_each_budget_by_its_stage() -> None:
    for command in ("run", "ab"):
        text = _help(command)
        assert "--timeout-ms" in text and "Verification budget per unit" in text
        assert "Does not bound the build" in text
        assert "--build-timeout-ms" in text and "Build budget, for every builder" in text
    readme = " ".join(README.read_text().split())
    assert "`--build-timeout-ms` bounds the build for every builder" in readme
    assert "`--timeout-ms` the verification" in readme
    assert "verification budget per unit" in (RunConfig.model_fields["timeout_ms"].description or
                                               _field_comment("timeout_ms"))
    assert "the build budget, for every builder" in _field_comment("build_timeout_ms")


def _field_comment(name: str) -> str:
    """The ``#:`` comment above a RunConfig field (its documentation in the code)."""
    src = (Path(__file__).resolve().parents[1] / "orchestrator" / "run" / "config.py").read_text().splitlines()
    at = next(i for i, line in enumerate(src) if line.strip().startswith(f"{name}:"))
    lines: list[str] = []
    for line in reversed(src[:at]):
        if not line.strip().startswith("#:"):
            break
        lines.insert(0, line.strip()[2:].strip())
    return " ".join(lines)


def test_the_build_budget_defaults_per_builder_and_is_never_the_verification_budget() -> None:
    """The default ``--build-timeout-ms`` is the reference's per builder: n8n ``harness/build-workflow.ts``
    ``DEFAULT_TIMEOUT_MS`` (900 s per user turn) for ``instance-ai``, n8n's ``--build-timeout-ms``
    default (1800 s per claude attempt) for ``mcp``; ``--timeout-ms`` changes neither."""
    cfg = RunConfig(timeout_ms=5_000)
    assert build_timeout_ms(cfg, get_builder("instance-ai")) == 900_000
    assert build_timeout_ms(cfg, get_builder("mcp")) == 1_800_000
    given = RunConfig(timeout_ms=5_000, build_timeout_ms=42_000)
    assert build_timeout_ms(given, get_builder("instance-ai")) == build_timeout_ms(given, get_builder("mcp")) == 42_000


def test_a_unit_gets_the_build_budget_for_its_build_and_the_verification_budget_for_verifying() -> None:
    """n8n ``harness/cleanup.ts`` ``effectiveTimeoutMs``: ``complex`` cases get 1.5× the base
    budget (build turn and scenario execution alike), simple and medium cases the base."""
    runner: Any = UnitRunner({}, {}, None, None,
                             UnitSettings(max_attempts=1, timeout_ms=100_000, keep_workflows=False,
                                          build_timeout_ms=400_000))

    def case(complexity: str) -> EvalCase:
        return EvalCase.model_validate({"conversation": [{"role": "user", "text": "Build it"}],
                                        "complexity": complexity, "tags": ["t"], "outcomeExpectations": ["x"]})

    assert (runner._build_timeout_ms(case("medium")), runner._timeout_ms(case("medium"))) == (400_000, 100_000)
    assert (runner._build_timeout_ms(case("complex")), runner._timeout_ms(case("complex"))) == (600_000, 150_000)
