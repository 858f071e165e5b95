"""Agent and config-eval artifacts on a real lane, offline: ``orchestrator run --builder instance-ai``
on a process lane with the embedded scripted model and sandbox. The judge's input
(``judge-inputs.jsonl``) carries the Agent / Config-eval section with the artifact's content."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from support.process_lanes import leftovers
from support.tools import require

from orchestrator.ledger import Ledger
from orchestrator.run.config import RunConfig
from orchestrator.run.pipeline import run
from orchestrator.toolchain import Toolchain, default_cache_dir

pytestmark = [pytest.mark.n8n, pytest.mark.slow]
CASES = Path(__file__).resolve().parents[2] / "cases"


async def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slug: str, **extra) -> tuple[dict, list[dict]]:
    require("n8n", Toolchain(default_cache_dir()).n8n_ready, "run `orchestrator lanes install`")
    for key in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "N8N_INSTANCE_AI_MODEL_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    run_id = f"artifacts-{int(time.time() * 1000) % 10_000_000}"
    state, out = tmp_path / "state", tmp_path / "out"
    cfg = RunConfig(cases_paths=[CASES], filter=slug or None, backend="process", lanes=1, builder="instance-ai",
                    model_server="scripted", state_dir=state, output_dir=out, run_id=run_id, **extra)
    outcome = await run(cfg)
    assert outcome.ok, outcome.errors
    assert outcome.cleanup_failures == []
    assert leftovers(run_id, state) == []
    ledger = Ledger.for_run(run_id, state)
    assert ledger.open_entries() == []
    # every artifact was deleted where it lives, none left for the lane's teardown to take along
    assert [(r["kind"], r["error"]) for r in ledger.records() if r["op"] == "delete_failed"] == []
    data = json.loads((out / "eval-results.json").read_text())["orchestrator"]
    inputs = [json.loads(line) for line in (out / "judge-inputs.jsonl").read_text().splitlines() if line.strip()]
    return data, inputs


async def test_a_standalone_agent_case_is_graded_on_its_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reference README "Artifact types": the Agent the build created (``agent-spawned``
    targetResource, n8n ``harness/artifacts/agent-handler.ts``) is fetched and rendered into the
    judge context (config + skills); a scenario-less agent case without a workflow is graded on its
    expectations, not a build failure."""
    data, inputs = await _run(tmp_path, monkeypatch, "agent-standalone-order-status-helper")
    [unit] = data["units"]
    assert unit["build"]["status"] == "ok" and unit["build"]["workflow_id"] is None, unit["build"]
    assert {e["verdict"] for e in unit["expectations"]} == {"pass"}, unit["expectations"]
    [call] = [i for i in inputs if i["target"] == "expectations"]
    prompt = call["prompt"]
    section = prompt.split("\n## Agent\n", 1)[1].split("\n## Config-eval\n", 1)[0]
    print(section[:1500])
    assert section.startswith("\n### Agent config") and '"name": "Order Status Helper"' in section
    assert "### Agent skills" in section
    assert "## Config-eval\n\n(no config-eval produced)" in prompt
    assert "(no workflow built)" in prompt
    assert sorted(call["kinds"]) == ["outcome", "outcome", "process"]  # one call for both kinds
    # the Agent lives in the build user's project: the unit's release deletes it, before the user
    deletes = [r["kind"] for r in Ledger.for_run(data["run_id"], tmp_path / "state").records() if r["op"] == "delete"]
    assert "agent" in deletes and deletes.index("agent") < deletes.index("user"), deletes


async def test_a_config_eval_case_shows_the_evaluation_and_its_dataset(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Reference README "Artifact types" and n8n ``harness/artifacts/config-eval-handler.ts``: the
    ``eval-config`` create call's owning workflow is the ref; its evaluation configs and a sample of
    the referenced data table are rendered into the judge context (``render-config-eval.ts``).
    The lane offers the tool with config evals enabled (``N8N_CONFIG_EVALS_ENABLED``)."""
    data, inputs = await _run(tmp_path, monkeypatch, "config-eval-greeting-correctness",
                              env=["N8N_CONFIG_EVALS_ENABLED=true"])
    [unit] = data["units"]
    assert unit["build"]["status"] == "ok" and unit["build"]["workflow_id"], unit["build"]
    [call] = [i for i in inputs if i["target"] == "expectations"]
    section = call["prompt"].split("\n## Config-eval\n", 1)[1].split("\n## Conversation transcript", 1)[0]
    print(section[:2500])
    assert section.startswith("\n### Evaluation configs") and '"Greeting correctness"' in section
    assert '"datasetSource": "data_table"' in section and unit["build"]["workflow_id"] not in section
    assert '"expected_answer"' in section and "hello from the scripted model" in section  # columns + sample rows
    assert "## Agent\n\n(no agent produced)" in call["prompt"]
    assert {e["verdict"] for e in unit["expectations"]} == {"pass"}, unit["expectations"]


async def test_the_agents_tier_runs_its_cases_under_the_absolute_gate(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Reference README: ``--tier agents`` runs the agent cases, and "PR runs use an absolute pass
    gate" (n8n ``comparison/gate.ts`` ``evaluateGate``): ``eval-pr-comment.md`` shows the gate in
    place of a baseline comparison, and the exit code follows it."""
    from orchestrator.cli.run_cmd import gate_exit_code
    from orchestrator.compare.gate import run_gate
    from orchestrator.results.model import EvalResults

    data, _ = await _run(tmp_path, monkeypatch, "", tier="agents")
    assert {u["case"] for u in data["units"]} == {"agent-standalone-order-status-helper", "seeded-agent-adds-refund-rule"}
    comment = (tmp_path / "out" / "eval-pr-comment.md").read_text()
    assert "### Gate" in comment and "Gate green" in comment and "### Comparison" not in comment
    results = EvalResults.model_validate(data)
    gate = run_gate(results)
    assert gate is not None and gate["green"] and gate_exit_code(gate) == 0
