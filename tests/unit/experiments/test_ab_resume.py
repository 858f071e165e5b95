"""A resumed A/B (``orchestrator ab --run-id ID --resume-existing``, what the chart's A/B Job runs):
each arm's run goes on from its state, and a sequential test goes on from the build pairs it saw.

Our own behaviour (n8n's harness has no A/B runner and no resume). A pair's score follows n8n's rule
in ``packages/@n8n/instance-ai/evaluations/harness/runner.ts`` (``runWorkflowTestCase``): a build that
created no workflow passes no scenario.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from support.eval_results_factory import unit
from support.langsmith_fake import API_KEY, FakeLangSmith, running
from support.polling import settle
from support.tools import require

from orchestrator.domain import BuildStatus
from orchestrator.experiments.ab import (
    Arm,
    HooksFactory,
    Lockstep,
    SequentialController,
    arm_config,
    finished_units,
    resumed_root,
    run_arms_sequential,
)
from orchestrator.experiments.langsmith_sync import COMPLETION_MARKER, LangSmithHooks
from orchestrator.experiments.sequential import Decision, SequentialDesign
from orchestrator.lanes.backend import BACKENDS
from orchestrator.lanes.model import Lane, LaneSpec
from orchestrator.lanes.process.backend import ProcessBackend
from orchestrator.results.model import UnitResult
from orchestrator.run.config import RunConfig
from orchestrator.run.pipeline import RunHooks
from orchestrator.run.plan import make_plan
from orchestrator.run.resolve import resolve
from orchestrator.toolchain import Toolchain, default_cache_dir

ARMS = [Arm("control", "anthropic/claude-sonnet-4-6"), Arm("variant", "anthropic/claude-sonnet-4-6")]
CASES = "smoke-manual-set-static-fields,smoke-manual-filter-adults"


def _finished(seed: int, pairs: int) -> dict[str, list[UnitResult]]:
    """Two arms' finished units over ``pairs`` (case, iteration) keys, the arms in random order within
    a key, wins and losses both ways, and one control unit whose partner had not finished."""
    rng = random.Random(seed)
    t = 1000.0
    out: dict[str, list[UnitResult]] = {"control": [], "variant": []}
    for i in range(pairs):
        for arm in rng.sample(["control", "variant"], 2):
            t += rng.uniform(1, 30)
            first = {0: "variant", 1: "control"}.get(i)  # fails first: one win each way, then chance
            failed = arm == first if first else rng.random() < (0.2 if arm == "control" else 0.5)
            out[arm].append(unit(f"case-{i % 3}", i // 3, None if failed else {"s": True},
                                 status=BuildStatus.failed if failed else BuildStatus.ok, started_at=t - 20, duration=20))
    t += 1
    out["control"].append(unit("case-9", 0, {"s": True}, started_at=t - 20, duration=20))  # unpaired so far
    return out


def _live(finished: dict[str, list[UnitResult]], design: SequentialDesign) -> SequentialController:
    """The controller as the first attempt fed it: each unit as it finished."""
    controller = SequentialController(design, "control", "variant")
    for arm, u in sorted(((a, u) for a, us in finished.items() for u in us), key=lambda p: p[1].finished_at):
        controller.add(arm, u)
    return controller


@pytest.mark.parametrize("seed", range(6))
def test_a_resumed_test_replays_the_finished_pairs_in_the_order_it_saw_them(seed: int) -> None:
    """The running discordance makes the test depend on the order of pairs: the replay must give the
    state the first attempt had, whatever order the files list the units in."""
    design = SequentialDesign(effect=0.3, max_pairs=40)  # discordance estimated from the pairs before
    finished = _finished(seed, pairs=14)
    live = _live(finished, design)
    assert live.state.control_wins and live.state.variant_wins  # evidence both ways: the order matters
    resumed = SequentialController(design, "control", "variant")
    shuffled = {arm: random.Random(seed).sample(us, len(us)) for arm, us in finished.items()}
    resumed.replay(shuffled)
    assert (resumed.state.pairs, resumed.state.control_wins, resumed.state.variant_wins) == \
           (live.state.pairs, live.state.control_wins, live.state.variant_wins)
    assert resumed.state.history == pytest.approx(live.state.history)
    assert resumed.state.decision == live.state.decision
    # the partner of the unpaired unit, built after the resume, completes its pair
    before = resumed.state.pairs
    resumed.add("variant", unit("case-9", 0, status=BuildStatus.failed))
    assert resumed.state.pairs == before + (resumed.state.decision is None)


async def test_the_lockstep_gate_goes_on_from_each_arms_finished_builds() -> None:
    """The arm that was ahead waits for the other to catch up, as it would have without the restart:
    a gate counting from zero would let it run ahead by as many builds as it led."""
    controller = SequentialController(SequentialDesign(effect=0.3, max_pairs=40), "c", "v")
    gate = controller.gate = Lockstep(("c", "v"))
    controller.replay({"c": [unit("a", i, {"s": True}) for i in range(5)],
                       "v": [unit("a", i, {"s": True}) for i in range(3)]})
    assert gate.started == gate.finished == {"c": 5, "v": 3}
    ahead = asyncio.create_task(gate.enter("c"))
    await settle()
    assert not ahead.done()  # the control's 6th build waits for the variant's 4th and 5th
    for _ in range(2):
        await gate.enter("v")  # the arm behind never waits
        await gate.leave("v")
    await asyncio.wait_for(ahead, 1)


def test_finished_units_are_what_the_arms_resume_keeps(tmp_path: Path) -> None:
    from orchestrator.results.model import EvalResults
    from orchestrator.results.writer import ResultsWriter

    cfg = arm_config(RunConfig(state_dir=tmp_path / "state", resume_existing=True), ARMS[0], ab_id="ab-x",
                     experiment_name="e", output_root=tmp_path / "out")
    assert cfg.resume_existing and cfg.run_id == "ab-x-control"
    assert finished_units(cfg) == []  # never started
    run_dir = tmp_path / "state" / "runs" / "ab-x-control"
    run_dir.mkdir(parents=True)
    writer = ResultsWriter(EvalResults(run_id="ab-x-control", started_at=0.0), tmp_path / "out" / "control", run_dir)
    writer.add(unit("a", 0, {"s": True}))
    writer.add(unit("a", 1, status=BuildStatus.skipped))  # never ran: the resume runs it
    writer.add(unit("b", 0, {"s": False}))
    with (run_dir / "units.jsonl").open("a") as fh:
        fh.write('{"case": "torn')  # a crash mid-line
    assert [(u.case, u.iteration) for u in finished_units(cfg)] == [("a", 0), ("b", 0)]


class _Watched(ProcessBackend):
    """Process lanes that say what the run asked of them."""

    name = "process-watched"
    calls: ClassVar[list[str]] = []

    async def start_lane(self, index: int, spec: LaneSpec) -> Lane:
        self.calls.append(f"start {self.run_id}")
        return await super().start_lane(index, spec)

    async def take_over_leftovers(self) -> None:
        self.calls.append(f"take over {self.run_id}")


@pytest.fixture
def watched() -> Iterator[list[str]]:
    _Watched.calls = []
    with BACKENDS.registered(_Watched):
        yield _Watched.calls


async def _first_attempt(base: RunConfig, first_root: Path, hooks_for: HooksFactory | None = None) -> int:
    """The first attempt of A/B ``ab-r``: each arm planned, 7 of its 10 units built (the variant's
    build no workflow), then the pod went before any report. What it recorded goes to ``hooks_for``'s
    hooks as a live run records it. Returns the number of builds."""
    built = 0
    for arm in ARMS:
        cfg = arm_config(base, arm, ab_id="ab-r", experiment_name="e", output_root=first_root)
        hooks = hooks_for(cfg) if hooks_for is not None else []
        plan = await make_plan(resolve(cfg))
        for hook in hooks:
            await hook.on_cases(plan.run_id, plan.cases)
        for i, work in enumerate(plan.units[:7]):
            if arm.name == "variant":  # no workflow: no scenario passes
                done_unit = unit(work.case, work.iteration, status=BuildStatus.failed, started_at=2000.0 + i)
            else:
                done_unit = unit(work.case, work.iteration, {"s": True}, started_at=2000.0 + i)
            plan.writer.add(done_unit)
            for hook in hooks:
                await hook.on_unit(done_unit)
            built += 1
        plan.lock.release()
    return built


def _decided_base(tmp_path: Path) -> RunConfig:
    require("n8n", Toolchain(default_cache_dir()).n8n_ready, "run `orchestrator lanes install`")
    return RunConfig(state_dir=tmp_path / "state", filter=CASES, iterations=5, lanes=1, builder="instance-ai",
                     backend=_Watched.name, model_server="scripted", resume_existing=True)


DECIDES_AT_6 = SequentialDesign(effect=0.45, discordance=0.5, max_pairs=10)  # at the 6th one-way pair


@pytest.mark.n8n
async def test_a_resumed_sequential_ab_that_had_decided_builds_nothing_more(tmp_path: Path, watched: list[str]) -> None:
    """The first attempt saw enough pairs to decide and was replaced before it wrote its report: the
    replacement replays them, decides at the same pair, starts no lane and no build, keeps each arm's
    results where the first attempt wrote them, and counts every build of the experiment. Each arm's
    run still asks its backend to take over what the first attempt left (on Kubernetes: its lanes,
    ``tests/unit/lanes/kubernetes/test_k8s_resume.py``)."""
    base = _decided_base(tmp_path)
    first_root = tmp_path / "first-pod"
    built = await _first_attempt(base, first_root)
    assert resumed_root(base, ARMS, "ab-r") == first_root

    done, outcome = await run_arms_sequential(base, ARMS, DECIDES_AT_6, ab_id="ab-r", experiment_name="e",
                                              output_root=first_root)
    assert outcome.state.decision is Decision.control_better and outcome.state.decided_at == 6
    assert outcome.builds_run == built == 14 and outcome.fixed_builds == 20
    for arm_run in done:
        results = arm_run.results
        assert arm_run.outcome.results_path == first_root / arm_run.arm.name / "eval-results.json"
        assert not results.lanes and not arm_run.outcome.errors  # no lane started
        ran = [u for u in results.units if u.build.status is not BuildStatus.skipped]
        assert len(ran) == 7 and all(u.started_at >= 2000.0 for u in ran)  # the first attempt's builds, kept
        assert results.summary is not None and results.summary.stopped_reason is not None
        assert results.summary.stopped_reason.startswith("sequential A/B: control better after 6")
    assert sorted(watched) == ["take over ab-r-control", "take over ab-r-variant"]  # and no lane started


@pytest.fixture
def langsmith() -> Iterator[tuple[FakeLangSmith, str]]:
    with running() as found:
        yield found


@pytest.mark.n8n
async def test_a_resumed_ab_records_into_each_arms_first_experiment(tmp_path: Path, watched: list[str],
                                                                   langsmith: tuple[FakeLangSmith, str]) -> None:
    """With LangSmith on, a replaced A/B pod goes on recording each arm into the experiment its first
    attempt opened (no third or fourth experiment, no unit recorded twice), and closes both with
    n8n's completion marker (``packages/@n8n/instance-ai/evaluations/comparison/fetch-baseline.ts``
    reads it)."""
    store, url = langsmith
    env = {"LANGSMITH_API_KEY": API_KEY, "LANGSMITH_ENDPOINT": url}

    def hooks_for(cfg: RunConfig) -> list[RunHooks]:
        hooks = LangSmithHooks.from_env(cfg, env, retries=0, feedback_attempts=1)
        assert hooks is not None
        return [hooks]

    base = _decided_base(tmp_path)
    await _first_attempt(base, tmp_path / "first-pod", hooks_for)
    opened = {sid: dict(s) for sid, s in store.sessions.items()}
    recorded = len(store.runs)
    assert len(opened) == 2 and recorded > 0
    assert not any(COMPLETION_MARKER in (s.get("extra") or {}).get("metadata", {}) for s in opened.values())

    await run_arms_sequential(base, ARMS, DECIDES_AT_6, ab_id="ab-r", experiment_name="e",
                              output_root=tmp_path / "first-pod", hooks_for=hooks_for)
    assert set(store.sessions) == set(opened)  # each arm kept its experiment
    assert len(store.runs) == recorded  # the kept units are not recorded again
    for sid, session in store.sessions.items():
        assert session["name"] == opened[sid]["name"]
        assert COMPLETION_MARKER in (session.get("extra") or {}).get("metadata", {}), session
    assert store.unknown == []
