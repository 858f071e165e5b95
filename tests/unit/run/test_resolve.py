"""Issue 38, "resolve once, then freeze": a run's flags are a frozen ``RunConfig``; ``resolve`` decides
what they imply once, into a frozen ``ResolvedRun``; ``preflight`` checks what needs I/O — on the
resolved selection, so ``--resume`` checks the cases it will run."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from orchestrator.errors import ConfigError
from orchestrator.results.writer import RUN_FILENAME
from orchestrator.run.config import RunConfig
from orchestrator.run.pipeline import Run
from orchestrator.run.resolve import resolve

CASES = Path(__file__).resolve().parents[3] / "cases"
CLOSED = "http://127.0.0.1:9"  # the discard port: nothing listens on loopback


def test_a_run_config_is_frozen_and_a_changed_copy_is_checked_as_the_flags_are() -> None:
    cfg = RunConfig(lanes=2)
    with pytest.raises(ValidationError, match="frozen"):
        cfg.lanes = 3
    assert cfg.replace(lanes=3).lanes == 3 and cfg.lanes == 2
    with pytest.raises(ConfigError, match="^--lanes: must be ≥ 1, got 0$"):
        cfg.replace(lanes=0)


def test_a_resolved_run_is_frozen(tmp_path: Path) -> None:
    run = resolve(RunConfig(state_dir=tmp_path, env=["N8N_LOG_LEVEL=debug"]))
    untyped: Any = run  # the writes its types forbid, tried as a caller that ignores them would
    with pytest.raises(dataclasses.FrozenInstanceError):
        untyped.build_timeout_ms = 1
    with pytest.raises(TypeError):
        untyped.lane_env["N8N_LOG_LEVEL"] = "info"
    spec = run.lane_spec()
    spec.env["N8N_LOG_LEVEL"] = "info"  # a lane's spec is its own copy
    assert run.lane_env["N8N_LOG_LEVEL"] == "debug" and run.explicit_env == {"N8N_LOG_LEVEL"}


def test_a_run_built_from_a_resolved_run_has_nothing_left_to_fill_in(tmp_path: Path) -> None:
    """What a run opens as it goes (plan, builder, gateway, provisioner, allocator) is passed along
    its stages, not parked on the run as ``None`` until then: only the stop reason waits to be set."""
    run = Run(resolve(RunConfig(state_dir=tmp_path)))
    unset = sorted(name for name, value in vars(run).items() if value is None)
    assert unset == ["stop_reason"]
    assert not run.units.engaged and run.units.per_lane() == {}


def test_resolve_decides_the_builder_the_budget_the_run_id_and_the_output_dir_once(tmp_path: Path) -> None:
    run = resolve(RunConfig(state_dir=tmp_path, builder="mcp"))
    assert run.builder.name == "mcp" and run.config.builder == "mcp"
    assert run.build_timeout_ms == run.builder.default_build_timeout_ms  # no --build-timeout-ms: the builder's
    assert run.config.run_id == run.run_id and run.output_dir == Path("results") / run.run_id
    again = resolve(run.config)  # what it decided, it decides again the same way
    assert (again.config, again.build_timeout_ms, again.stack) == (run.config, run.build_timeout_ms, run.stack)
    langtracer = resolve(RunConfig(state_dir=tmp_path, source="langtracer", suite="nightly"))
    assert langtracer.config.dataset == langtracer.config.baseline_prefix == "instance-ai-langtracer-nightly"


def _stored_run(state: Path, run_id: str, **selection: object) -> None:
    directory = state / "runs" / run_id
    directory.mkdir(parents=True)
    stored = RunConfig(cases_paths=[CASES], run_id=run_id, state_dir=state, **selection).public()
    (directory / RUN_FILENAME).write_text(json.dumps(stored, default=str))


def test_resume_takes_the_stored_selection_and_keeps_this_invocations_lane_options(tmp_path: Path) -> None:
    state = tmp_path / "state"
    _stored_run(state, "r1", filter="smoke-manual-code-greetings", iterations=3, output_dir=tmp_path / "first")
    run = resolve(RunConfig(state_dir=state, resume="r1", filter="something-else", iterations=1, lanes=5))
    cfg = run.config
    assert (cfg.filter, cfg.iterations, cfg.lanes) == ("smoke-manual-code-greetings", 3, 5)
    assert run.run_id == "r1" and run.resumed and run.output_dir == tmp_path / "first"
    with pytest.raises(ConfigError, match="^--resume: no run 'r2' under "):
        resolve(RunConfig(state_dir=state, resume="r2"))


def test_resume_with_the_prebuilt_builder_checks_the_resumed_selection(tmp_path: Path, orchestrator_cmd: list[str]) -> None:
    """The prebuilt builder checks that every selected case has a workflow in the manifest. On
    ``--resume`` the selection is the stored run's (here one case), not the flags' default (every
    case): the manifest is checked against the case the run will run, and the next check (the lane
    answering) is what stops this one."""
    state, manifest = tmp_path / "state", tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"smoke-manual-code-greetings": ["W1"]}))
    _stored_run(state, "r1", filter="smoke-manual-code-greetings")
    common = [str(CASES), "--state-dir", str(state), "--backend", "static", "--base-url", CLOSED, "--lanes", "1",
              "--prebuilt-workflows", str(manifest)]
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}

    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*orchestrator_cmd, "run", *common, *extra], capture_output=True, text=True, env=env,
                              timeout=120, check=False)

    resumed = run("--resume", "r1")
    assert resumed.returncode == 2, resumed.stderr
    assert "--base-url: lane s0 at http://127.0.0.1:9 is unreachable" in resumed.stderr
    assert "--prebuilt-workflows" not in resumed.stderr and "Traceback" not in resumed.stderr
    fresh = run()  # no --resume: every case is selected, most have no workflow in the manifest
    assert fresh.returncode == 2 and "--prebuilt-workflows: selected case(s)" in fresh.stderr, fresh.stderr
