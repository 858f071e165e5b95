"""LangSmith experiments against a local stand-in for the REST endpoints the SDK calls.

The endpoints below are the ones the ``langsmith`` SDK (0.15) was seen to call with
``auto_batch_tracing=False``: ``/info``, ``/datasets``, ``/examples``, ``/examples/bulk`` (POST
create, PATCH update), ``/sessions`` (create, list by ``name``/``name_contains``, read, PATCH),
``/runs`` (create), ``/feedback`` and ``/runs/query`` (list runs of a project). Anything else is
answered 404 and recorded in ``unknown``, which the tests assert stays empty.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.eval_results_factory import unit
from support.langsmith_fake import API_KEY, FakeLangSmith, serve

from orchestrator.cases import LoadedCase
from orchestrator.cases.model import EvalCase
from orchestrator.experiments.langsmith_rows import (
    per_run_pass_metrics,
    row_feedback,
    unit_feedback,
    unit_outputs,
    unit_rows,
)
from orchestrator.experiments.langsmith_sync import (
    DEFAULT_DATASET,
    LangSmithHooks,
    dataset_name,
    default_experiment_name,
    default_hooks,
)
from orchestrator.redact import register_secret
from orchestrator.results.model import BuildStatus, EvalResults
from orchestrator.results.scoring import summarize
from orchestrator.run.config import RunConfig


@pytest.fixture
def fake() -> Iterator[tuple[FakeLangSmith, str]]:
    store = FakeLangSmith()
    server, url = serve(store)
    yield store, url
    server.shutdown()
    server.server_close()


def _case(slug: str, prompt: str = "Build a workflow that greets everyone.", datasets: list[str] | None = None) -> LoadedCase:
    data: dict[str, Any] = {
        "conversation": [{"role": "user", "text": prompt}],
        "complexity": "simple", "tags": ["build"],
        "executionScenarios": [{"name": "happy-path", "description": "d", "dataSetup": "none",
                                "successCriteria": "it greets"}],
    }
    if datasets:
        data["datasets"] = datasets
    return LoadedCase(slug=slug, source=f"{slug}.json", case=EvalCase.model_validate(data))


def _cfg(tmp_path: Path, **kw: Any) -> RunConfig:
    kw.setdefault("model_server", "real")
    return RunConfig(state_dir=tmp_path / "state", experiment_name=kw.pop("experiment_name", "pr-123"), **kw)


def _hooks(url: str, tmp_path: Path, **kw: Any) -> LangSmithHooks:
    env = {"LANGSMITH_API_KEY": API_KEY, "LANGSMITH_ENDPOINT": url}
    hooks = LangSmithHooks.from_env(_cfg(tmp_path, **kw), env, retries=0, feedback_attempts=1)
    assert hooks is not None
    return hooks


def _results(run_id: str, units: list) -> EvalResults:
    summary, cases = summarize(units, 1, len(units))
    return EvalResults(run_id=run_id, started_at=time.time() - 10, finished_at=time.time(), units=units,
                       summary=summary, cases=cases)


# --------------------------------------------------------------------------- tests


async def test_cases_synced_once_then_changed_case_upserted(fake, tmp_path: Path) -> None:
    store, url = fake
    """Opt-in (``--sync-dataset``): the cases are upserted into the dataset."""
    cases = [_case("smoke-a", datasets=["smoke", "full"]), _case("smoke-b")]
    await _hooks(url, tmp_path, sync_dataset=True).on_cases("run-1", cases)
    assert len(store.datasets) == 1 and next(iter(store.datasets.values()))["name"] == DEFAULT_DATASET
    assert sorted(e["metadata"]["slug"] for e in store.examples.values()) == ["smoke-a", "smoke-b"]
    by_slug = {e["metadata"]["slug"]: e for e in store.examples.values()}
    assert by_slug["smoke-a"]["metadata"]["dataset_split"] == ["smoke-a", "smoke", "full"]
    assert by_slug["smoke-a"]["inputs"]["case"]["conversation"][0]["text"].startswith("Build a workflow")

    # the same cases again: nothing is written to the dataset
    await _hooks(url, tmp_path, sync_dataset=True).on_cases("run-2", cases)
    assert store.calls("POST", "/examples/bulk") == 1 and store.calls("PATCH", "/examples/bulk") == 0
    assert len(store.examples) == 2 and store.calls("POST", "/datasets") == 1

    # one case changed, one added: the changed one is updated in place, the new one created
    changed = [_case("smoke-a", prompt="Build a workflow that greets only adults.", datasets=["smoke"]), _case("smoke-b"),
               _case("smoke-c")]
    await _hooks(url, tmp_path, sync_dataset=True).on_cases("run-3", changed)
    assert store.calls("PATCH", "/examples/bulk") == 1 and store.calls("POST", "/examples/bulk") == 2
    patched = [json.loads(b) for m, p, b, _ in store.requests if m == "PATCH" and p.startswith("/examples/bulk")][0]
    assert [u["id"] for u in patched] == [by_slug["smoke-a"]["id"]]
    by_slug = {e["metadata"]["slug"]: e for e in store.examples.values()}
    assert len(store.examples) == 3
    assert "only adults" in by_slug["smoke-a"]["inputs"]["case"]["conversation"][0]["text"]
    assert by_slug["smoke-a"]["metadata"]["dataset_split"] == ["smoke-a", "smoke"]
    assert len(store.sessions) == 3 and all(s["name"].startswith("pr-123-") for s in store.sessions.values())
    assert store.unknown == []


async def test_units_recorded_with_feedback_and_no_secrets(fake, tmp_path: Path) -> None:
    store, url = fake
    mcp_key = "mcp-token-ZZZ-0123456789"
    register_secret(mcp_key)
    await _hooks(url, tmp_path, sync_dataset=True).on_cases("run-0", [_case("smoke-a")])  # the dataset exists
    store.sessions.clear()
    hooks = _hooks(url, tmp_path)
    assert hooks.client.tracing_queue is None  # synchronous writes: no background batching thread
    await hooks.on_cases("run-1", [_case("smoke-a")])
    (session,) = store.sessions.values()
    assert session["reference_dataset_id"] == next(iter(store.datasets))
    assert session["extra"]["metadata"]["run_id"] == "run-1"
    assert session["extra"]["metadata"]["model_server"] == "real"
    ok = unit("smoke-a", 0, {"happy-path": True}, {"The workflow greets": True}, cost=0.25, turns=7)
    bad = unit("smoke-a", 1, {"happy-path": False}, cost=0.5, turns=9, reason=f"the MCP call with {mcp_key} failed")
    await hooks.on_unit(ok)
    await hooks.on_unit(bad)

    assert len(store.runs) == 2  # one per (case, scenario, iteration), as n8n records them
    runs = {r["name"]: r for r in store.runs.values()}
    first = runs["smoke-a/happy-path#0"]
    assert first["reference_example_id"] == next(iter(store.examples))
    assert first["inputs"] == {"testCaseFile": "smoke-a", "scenarioName": "happy-path", "_iteration": 0}
    assert first["outputs"]["passed"] is True and first["outputs"]["workflowId"] == "wf1"
    assert first["outputs"]["expectationResults"] == [{"expectation": "The workflow greets", "pass": True,
                                                       "reason": ""}]
    assert first["outputs"]["orchestrator"]["unit"]["case"] == "smoke-a"
    assert runs["smoke-a/happy-path#1"]["outputs"]["passed"] is False
    fb = {(f["run_id"], f["key"]): f for f in store.feedback}
    ok_id, bad_id = first["id"], runs["smoke-a/happy-path#1"]["id"]
    assert fb[(ok_id, "scenario_pass")]["score"] == 1 and fb[(ok_id, "failure_category")]["value"] == "none"
    assert fb[(bad_id, "scenario_pass")]["score"] == 0
    assert fb[(ok_id, "build_cost_usd")]["score"] == 0.25 and fb[(ok_id, "build_turns")]["score"] == 7
    assert fb[(bad_id, "build_cost_usd")]["score"] == 0.5 and fb[(bad_id, "build_turns")]["score"] == 9
    assert fb[(ok_id, "scenario.happy-path")]["score"] == 1 and fb[(bad_id, "scenario.happy-path")]["score"] == 0
    assert fb[(ok_id, "expectation.outcome.the-workflow-greets")]["score"] == 1
    assert fb[(bad_id, "attribution")]["value"] == "builder_issue"
    assert (ok_id, "attribution") not in fb
    assert all(f["session_id"] == session["id"] for f in store.feedback)

    bodies = b"".join(b for _, _, b, _ in store.requests)
    assert mcp_key.encode() not in bodies and API_KEY.encode() not in bodies
    assert b"***" in bodies  # the secret was masked, not dropped with its run
    assert all(h.get("x-api-key") == API_KEY for _, _, _, h in store.requests)
    assert store.unknown == []


async def test_baseline_found_and_comparison_returned(fake, tmp_path: Path) -> None:
    store, url = fake
    old = dt.datetime.now(dt.UTC) - dt.timedelta(days=3)
    stale = store.add_session("instance-ai-baseline-0000aaaa", old - dt.timedelta(days=1),
                              metadata={"pass_rate_per_iter": "0%"})
    newest = store.add_session("instance-ai-baseline-7abc1234", old, metadata={"pass_rate_per_iter": "100%"})
    store.add_session("someone-else-1234", old + dt.timedelta(days=1))  # newer, but not a baseline
    hooks = _hooks(url, tmp_path)
    baseline_units = [unit("smoke-a", i, {"happy-path": True}) for i in range(5)]
    for u in baseline_units:
        store.add_run(newest, unit_outputs(u))
    store.add_run(stale, unit_outputs(unit("smoke-a", 0, {"happy-path": False})))
    store.add_run(newest, {"something": "recorded by another tool"})

    await hooks.on_cases("run-1", [_case("smoke-a")])
    pr_units = [unit("smoke-a", i, {"happy-path": False}) for i in range(5)]
    for u in pr_units:
        await hooks.on_unit(u)
    results = _results("run-1", pr_units)
    comparison = await hooks.on_finish(results)

    assert comparison is not None
    assert comparison["baseline"]["experimentName"] == "instance-ai-baseline-7abc1234"
    (u,) = comparison["evaluationUnits"]
    assert u["key"] == "smoke-a/happy-path" and (u["baselinePasses"], u["baselineTotal"]) == (5, 5)
    assert u["prPasses"] == 0 and u["verdict"] == "hard_regression"
    assert hooks.baseline is not None and len(hooks.baseline.units) == 5 and hooks.comparison_status == "ok"
    assert results.config["langsmith"]["baseline"] == "instance-ai-baseline-7abc1234"
    own = next(s for s in store.sessions.values() if s["name"].startswith("pr-123-"))
    assert own["end_time"] is not None
    assert own["extra"]["metadata"]["pass_rate_per_iter"] == "0% / 0% / 0% / 0% / 0%"  # n8n's completion marker
    assert store.unknown == []


async def test_baseline_run_itself_and_no_baseline_skip(fake, tmp_path: Path) -> None:
    """n8n ``run/langsmith-driver.ts`` ``tryRunComparison`` and ``run/persist.ts`` ``comparisonStatus``:
    no baseline experiment → ``no_baseline``; the newest baseline is this run's own experiment (a
    master run named ``instance-ai-baseline``) → ``self_baseline``, nothing compared."""
    store, url = fake
    hooks = _hooks(url, tmp_path)
    await hooks.on_cases("run-1", [_case("smoke-a")])
    assert await hooks.on_finish(_results("run-1", [unit("smoke-a", 0, {"happy-path": True})])) is None  # none yet
    assert hooks.comparison_status == "no_baseline"

    store.add_session("instance-ai-baseline-old00000", dt.datetime.now(dt.UTC) - dt.timedelta(days=1))
    creating = _hooks(url, tmp_path, experiment_name="instance-ai-baseline")
    await creating.on_cases("run-2", [_case("smoke-a")])
    await creating.on_unit(unit("smoke-a", 0, {"happy-path": True}))
    assert await creating.on_finish(_results("run-2", [unit("smoke-a", 0, {"happy-path": True})])) is None
    assert creating.comparison_status == "self_baseline"
    assert creating.failures == [] and hooks.failures == []


async def test_server_error_everywhere_leaves_the_run_unaffected(tmp_path: Path, caplog) -> None:
    store = FakeLangSmith(fail_all=True)
    server, url = serve(store)
    try:
        hooks = _hooks(url, tmp_path)  # retries=0: each failing call is asked once
        assert await hooks.on_cases("run-1", [_case("smoke-a")]) is None
        assert await hooks.on_unit(unit("smoke-a", 0, {"happy-path": True})) is None
        assert await hooks.on_finish(_results("run-1", [unit("smoke-a", 0, {"happy-path": True})])) is None
        # the dataset sync gave up at its first failure (no example, no experiment asked for), and so
        # did the baseline lookup: nothing is retried or waited for
        assert [(m, p.split("?")[0]) for m, p, _, _ in store.requests] == [("GET", "/datasets"), ("GET", "/sessions")]
    finally:
        server.shutdown()
        server.server_close()
    assert hooks.experiment is None and len(hooks.failures) == 2
    assert hooks.comparison_status == "fetch_failed" and hooks.comparison_error == hooks.failures[-1]
    assert any("LangSmith dataset sync" in r.getMessage() for r in caplog.records)
    assert all(API_KEY not in r.getMessage() for r in caplog.records)


async def test_unreachable_server_is_best_effort(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    hooks = _hooks(f"http://127.0.0.1:{port}", tmp_path)
    assert await hooks.on_cases("run-1", [_case("smoke-a")]) is None
    assert await hooks.on_finish(_results("run-1", [])) is None
    assert len(hooks.failures) == 2


def test_default_hooks_only_with_api_key(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    assert default_hooks(cfg, {}) == []
    hooks = default_hooks(cfg, {"LANGSMITH_API_KEY": API_KEY, "LANGSMITH_ENDPOINT": "http://127.0.0.1:9"})
    assert len(hooks) == 1 and isinstance(hooks[0], LangSmithHooks)


def test_dataset_and_experiment_names(tmp_path: Path) -> None:
    assert dataset_name(RunConfig()) == DEFAULT_DATASET
    assert dataset_name(RunConfig(dataset="mcp-workflow-evals")) == "mcp-workflow-evals"
    assert dataset_name(RunConfig(source="langtracer", suite="baseline")) == "instance-ai-langtracer-baseline"
    ci = {"CI": "true", "LANGSMITH_BRANCH": "feat/x", "LANGSMITH_REVISION_ID": "abcdef0123456789"}
    assert default_experiment_name(ci, tmp_path) == "feat-x-abcdef01"
    # no git here, not CI: still a name
    assert default_experiment_name({}, tmp_path) == "local-unknown-unknown"
    repo = Path(__file__).resolve().parents[3]
    local = default_experiment_name({}, repo)
    assert local.startswith("local-") and "unknown" not in local


def test_feedback_leaves_out_incomplete_verdicts() -> None:
    keys = [f.key for f in unit_feedback(unit("c", 0, {"s1": True, "s2": None}, {"e": None}))]
    assert keys == ["scenario.s1", "unit_pass"]


def test_every_row_carries_n8ns_feedback_keys() -> None:
    """n8n ``run/langsmith-driver.ts`` ``feedbackExtractor`` (04d53711): on every row of a build
    ``failure_category``, ``exec_duration_s``, ``node_count``, ``build_duration_s``;
    ``scenario_pass`` unless incomplete; ``plan_rejection_count`` on scenario rows;
    ``build_cost_usd`` / ``build_turns`` on MCP builds only."""
    mcp = unit("c", 0, {"s1": True, "s2": None})
    mcp.builder, mcp.build.plan_rejections, mcp.build.duration_s = "mcp", 2, 12.5
    mcp.scenarios[0].duration_s = 3.25
    rows = unit_rows(mcp)
    first, second = ({f.key: f for f in row_feedback(r, mcp)} for r in rows)
    assert first["exec_duration_s"].score == 3.25 and first["build_duration_s"].score == 12.5
    assert first["plan_rejection_count"].score == 2 and first["scenario_pass"].score == 1.0
    assert "scenario_pass" not in second and second["exec_duration_s"].score == 0.0
    assert {"build_cost_usd", "build_turns", "node_count", "failure_category"} <= first.keys() & second.keys()
    chat = unit("c", 0, {"s1": True})
    chat.builder = "instance-ai"
    assert "build_cost_usd" not in {f.key for f in row_feedback(unit_rows(chat)[0], chat)}


def test_per_run_pass_metrics_are_n8ns() -> None:
    """n8n ``writePerRunPassMetrics``: per example (case, scenario) over its non-incomplete runs,
    pass_at_k = 1 when any passed and pass_hat_k = (c/n)^n, on every such run; none for n = 0."""
    runs = [(f"r{i}", {"testCaseFile": "c", "scenarioName": "s"}, {"passed": passed, **extra})
            for i, (passed, extra) in enumerate([(True, {}), (False, {}), (True, {}), (False, {"incomplete": True})])]
    runs.append(("r9", {"testCaseFile": "c", "scenarioName": "t"}, {"passed": False, "incomplete": True}))
    out = {(run, fb.key): fb.score for run, fb in per_run_pass_metrics(runs)}
    assert out == {(f"r{i}", key): value for i in range(3)
                   for key, value in (("pass_at_k", 1.0), ("pass_hat_k", (2 / 3) ** 3))}


async def test_resumed_run_keeps_its_experiment(fake, tmp_path: Path) -> None:
    store, url = fake
    first = _hooks(url, tmp_path)
    await first.on_cases("run-1", [_case("smoke-a")])
    await first.on_unit(unit("smoke-a", 0, {"happy-path": True}))
    resumed = _hooks(url, tmp_path, resume="run-1")
    await resumed.on_cases("run-1", [_case("smoke-a")])
    await resumed.on_unit(unit("smoke-a", 1, {"happy-path": False}))
    assert len(store.sessions) == 1 and resumed.experiment.id == first.experiment.id
    assert {r["session_id"] for r in store.runs.values()} == {str(first.experiment.id)} and len(store.runs) == 2


async def test_runs_do_not_write_the_shared_dataset_by_default(fake, tmp_path: Path) -> None:
    """n8n's dataset is shared; a run here only reads it unless ``--sync-dataset`` is given."""
    store, url = fake
    hooks = _hooks(url, tmp_path)
    await hooks.on_cases("run-1", [_case("smoke-a")])
    await hooks.on_unit(unit("smoke-a", 0, {"happy-path": True}))
    assert store.datasets == {} and store.examples == {}
    assert store.calls("POST", "/datasets") == 0 and store.calls("POST", "/examples/bulk") == 0
    (session,) = store.sessions.values()
    assert session["reference_dataset_id"] is None and len(store.runs) == 1
    assert hooks.failures == [] and store.unknown == []


async def test_scripted_runs_are_tagged_and_never_a_baseline(fake, tmp_path: Path) -> None:
    """A scripted-model run measures the pipeline, not a model: its experiment is named
    ``scripted-…`` (so n8n's ``findLatestBaseline`` prefix never matches it), says so in its
    metadata, tags its runs, and our baseline lookup skips any scripted experiment."""
    store, url = fake
    day = dt.datetime.now(dt.UTC) - dt.timedelta(days=2)
    real = store.add_session("instance-ai-baseline-real0001", day, metadata={"pass_rate_per_iter": "100%"})
    store.add_run(real, unit_outputs(unit("smoke-a", 0, {"happy-path": True})),
                  {"testCaseFile": "smoke-a", "scenarioName": "happy-path", "_iteration": 0})
    # newer and completed, but recorded on the scripted model under the baseline's own prefix
    store.add_session("instance-ai-baseline-scrp0002", day + dt.timedelta(hours=1),
                      metadata={"pass_rate_per_iter": "100%", "model_server": "scripted"})

    scripted = _hooks(url, tmp_path, experiment_name="instance-ai-baseline", model_server="scripted")
    await scripted.on_cases("run-1", [_case("smoke-a")])
    await scripted.on_unit(unit("smoke-a", 0, {"happy-path": False}))
    comparison = await scripted.on_finish(_results("run-1", [unit("smoke-a", 0, {"happy-path": False})]))
    own = next(s for s in store.sessions.values() if s["name"].startswith("scripted-"))
    assert own["name"].startswith("scripted-instance-ai-baseline-")
    assert own["extra"]["metadata"]["model_server"] == "scripted"
    assert all(r["tags"] == ["model-server:scripted"] for r in store.runs.values() if r["session_id"] == own["id"])
    assert comparison is not None and comparison["baseline"]["experimentName"] == "instance-ai-baseline-real0001"

    later = _hooks(url, tmp_path)
    await later.on_cases("run-2", [_case("smoke-a")])
    comparison = await later.on_finish(_results("run-2", [unit("smoke-a", 0, {"happy-path": True})]))
    assert comparison is not None and comparison["baseline"]["experimentName"] == "instance-ai-baseline-real0001"


async def test_n8n_experiment_is_read_as_the_baseline(fake, tmp_path: Path) -> None:
    """n8n's ``comparison/fetch-baseline.ts`` (``findLatestBaseline``, ``fetchBaselineBucket``):
    the newest completed ``instance-ai-baseline-*`` experiment wins over a newer one without the
    completion marker; rows count per ``testCaseFile/scenarioName``, incomplete rows and rows
    without outputs are no trials, expectation verdicts come once per (case, iteration), and the
    ``__build_only__`` row is no scenario."""
    store, url = fake
    day = dt.datetime.now(dt.UTC) - dt.timedelta(days=2)
    exp = [{"expectation": "greets", "pass": True, "reason": ""}]
    rows = [("smoke-a", "happy-path", i, {"passed": True, "score": 1, "expectationResults": exp}) for i in range(3)]
    rows += [("smoke-a", "happy-path", 3, {"passed": False, "incomplete": True}),
             ("smoke-a", "happy-path", 4, {}),
             ("smoke-b", "__build_only__", 0, {"passed": False, "failureCategory": "expectations_failed",
                                               "expectationResults": [{"expectation": "x", "pass": False}]})]
    store.add_n8n_experiment("instance-ai-baseline-n8n00001", day, rows)
    store.add_n8n_experiment("instance-ai-baseline-killed02", day + dt.timedelta(hours=1),
                             [("smoke-a", "happy-path", 0, {"passed": False})], completed=False)
    hooks = _hooks(url, tmp_path)
    await hooks.on_cases("run-1", [_case("smoke-a")])
    pr = [unit("smoke-a", i, {"happy-path": False}, {"greets": False}) for i in range(3)]
    comparison = await hooks.on_finish(_results("run-1", pr))
    assert comparison is not None
    assert comparison["baseline"]["experimentName"] == "instance-ai-baseline-n8n00001"
    units = {u["key"]: u for u in comparison["evaluationUnits"]}
    assert (units["smoke-a/happy-path"]["baselinePasses"], units["smoke-a/happy-path"]["baselineTotal"]) == (3, 3)
    assert (units["smoke-a#expectation:greets"]["baselinePasses"],
            units["smoke-a#expectation:greets"]["baselineTotal"]) == (3, 3)
    assert {u["key"] for u in comparison["baselineOnly"]} == {"smoke-b#expectation:x"}


def _n8n_fetch_baseline_bucket(runs: list[dict[str, Any]]) -> dict[str, tuple[int, int]]:
    """n8n's ``fetchBaselineBucket`` (``comparison/fetch-baseline.ts``) reading rules, restated."""
    bucket: dict[str, list[int]] = {}
    carriers: set[str] = set()
    for run in runs:
        inputs, outputs = run.get("inputs") or {}, run.get("outputs")
        case, name, it = inputs.get("testCaseFile") or "", inputs.get("scenarioName") or "", inputs.get("_iteration", 0)
        if not case or not name or not isinstance(outputs, dict) or not outputs:
            continue
        assert isinstance(outputs.get("passed", False), bool)  # z.boolean()
        assert isinstance(outputs.get("failureCategory", ""), str)  # z.string().optional(): no null
        assert isinstance(outputs.get("incomplete", False), bool)
        results = outputs.get("expectationResults")
        if results is not None and f"{it}:{case}" not in carriers:
            carriers.add(f"{it}:{case}")
            for v in results:
                assert isinstance(v["expectation"], str) and isinstance(v["pass"], bool)
                if not v.get("incomplete"):
                    b = bucket.setdefault(f"{case}#expectation:{v['expectation']}", [0, 0])
                    b[0] += v["pass"]
                    b[1] += 1
        if name == "__build_only__" or outputs.get("incomplete"):
            continue
        b = bucket.setdefault(f"{case}/{name}", [0, 0])
        b[0] += outputs.get("passed", False)
        b[1] += 1
    return {k: (v[0], v[1]) for k, v in bucket.items()}


async def test_n8n_reads_our_experiment_with_the_same_counts(fake, tmp_path: Path) -> None:
    """Our rows, read with n8n's ``fetchBaselineBucket`` rules (``comparison/fetch-baseline.ts``),
    give exactly the pass/total counts our own scoring gives: n8n can take our experiment as its
    baseline."""
    from orchestrator.results.scoring import scoring_units

    store, url = fake
    hooks = _hooks(url, tmp_path)
    build_only = LoadedCase(slug="only-build", source="x.json", case=EvalCase.model_validate(
        {"conversation": [{"role": "user", "text": "Build it."}], "complexity": "simple", "tags": ["build"],
         "outcomeExpectations": ["It has a trigger."]}))
    smoke = _case("smoke-a")
    smoke.case.outcome_expectations.append("greets")
    await hooks.on_cases("run-1", [smoke, build_only])
    units = [unit("smoke-a", 0, {"happy-path": True}, {"greets": True}),
             unit("smoke-a", 1, {"happy-path": False}, {"greets": None}),
             unit("smoke-a", 2, {"happy-path": None}, {"greets": False}),
             unit("smoke-a", 3, status=BuildStatus.failed),
             unit("smoke-a", 4, status=BuildStatus.timeout),
             unit("only-build", 0, {}, {"It has a trigger.": True}),
             unit("only-build", 1, {}, {"It has a trigger.": False})]
    for u in units:
        await hooks.on_unit(u)
    n8n_view = _n8n_fetch_baseline_bucket(list(store.runs.values()))
    ours = {k: (su.c, su.n) for k, su in scoring_units(units).items() if su.n}
    assert n8n_view == ours


async def test_a_chat_build_is_traced_and_its_runs_get_per_run_pass_metrics(fake, tmp_path: Path) -> None:
    """n8n ``run/eval-session.ts`` (13a56a29): ``workflow_build`` traced under the first row of a build
    driven through the chat, ``scenario_execution`` under each scenario row that ran, children of the
    row's root run; ``writePerRunPassMetrics`` at the experiment's close (``run/langsmith-driver.ts``)."""
    store, url = fake
    hooks = _hooks(url, tmp_path)
    await hooks.on_cases("run-1", [_case("smoke-a")])
    units = [unit("smoke-a", i, {"happy-path": ok}) for i, ok in enumerate([True, False, True])]
    for u in units:
        u.builder, u.build.duration_s = "instance-ai", 4.0
        u.scenarios[0].duration_s = 1.5
        await hooks.on_unit(u)
    await hooks.on_finish(_results("run-1", units))
    roots = {r["id"]: r for r in store.runs.values() if not r.get("parent_run_id")}
    children = [r for r in store.runs.values() if r.get("parent_run_id")]
    assert sorted(r["name"] for r in children) == ["scenario_execution"] * 3 + ["workflow_build"] * 3
    for child in children:
        parent = roots[child["parent_run_id"]]
        assert child["trace_id"] == parent["id"] and child["dotted_order"].startswith(parent["dotted_order"] + ".")
    metrics = {(f["run_id"], f["key"]): f["score"] for f in store.feedback if f["key"] in ("pass_at_k", "pass_hat_k")}
    assert {key for _, key in metrics} == {"pass_at_k", "pass_hat_k"} and len(metrics) == 6
    assert all(score == pytest.approx((2 / 3) ** 3, abs=1e-4) for (_, key), score in metrics.items() if key == "pass_hat_k")
    assert store.unknown == []
