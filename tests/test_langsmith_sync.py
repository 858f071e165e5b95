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
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from eval_results_factory import unit

from orchestrator.cases import LoadedCase
from orchestrator.cases.model import EvalCase
from orchestrator.experiments.langsmith_sync import (
    DEFAULT_DATASET,
    LangSmithHooks,
    dataset_name,
    default_experiment_name,
    default_hooks,
    unit_feedback,
)
from orchestrator.redact import register_secret
from orchestrator.results.model import EvalResults
from orchestrator.results.scoring import summarize
from orchestrator.run.config import RunConfig

API_KEY = "lsv2_pt_testkey_0123456789abcdef"
TENANT = str(uuid.UUID(int=7))


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


class FakeLangSmith:
    """In-memory LangSmith: just enough state for datasets, examples, experiments, runs, feedback."""

    def __init__(self, *, fail_all: bool = False) -> None:
        self.fail_all = fail_all
        self.datasets: dict[str, dict[str, Any]] = {}
        self.examples: dict[str, dict[str, Any]] = {}
        self.sessions: dict[str, dict[str, Any]] = {}
        self.runs: dict[str, dict[str, Any]] = {}
        self.feedback: list[dict[str, Any]] = []
        self.requests: list[tuple[str, str, bytes, dict[str, str]]] = []
        self.unknown: list[str] = []
        self._lock = threading.Lock()

    # ------------------------------------------------------------ helpers for tests
    def calls(self, method: str, path: str) -> int:
        return sum(1 for m, p, _, _ in self.requests if m == method and urlparse(p).path == path)

    def add_session(self, name: str, start: dt.datetime, dataset_id: str | None = None) -> str:
        sid = str(uuid.uuid4())
        self.sessions[sid] = {"id": sid, "name": name, "start_time": start.isoformat(), "tenant_id": TENANT,
                              "reference_dataset_id": dataset_id, "extra": {}}
        return sid

    def add_run(self, session_id: str, outputs: dict[str, Any]) -> None:
        rid = str(uuid.uuid4())
        self.runs[rid] = {"id": rid, "name": "x", "run_type": "chain", "start_time": _now(), "inputs": {},
                          "outputs": outputs, "session_id": session_id, "trace_id": rid, "parent_run_id": None}

    # ------------------------------------------------------------ routing
    def handle(self, method: str, raw_path: str, body: bytes) -> tuple[int, Any]:
        if self.fail_all:
            return 500, {"detail": "internal error"}
        url = urlparse(raw_path)
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        path = url.path.rstrip("/")
        data = json.loads(body) if body else None
        parts = path.strip("/").split("/")
        if method == "GET" and path == "/info":
            return 200, {"version": "0.10.0", "instance_flags": {}}
        if path == "/datasets":
            if method == "GET":
                found = [d for d in self.datasets.values() if "name" not in q or d["name"] == q["name"]]
                return 200, found[: int(q.get("limit", 100))]
            if method == "POST":
                if any(d["name"] == data["name"] for d in self.datasets.values()):
                    return 409, {"detail": "exists"}
                did = str(uuid.uuid4())
                self.datasets[did] = {"id": did, "name": data["name"], "description": data.get("description"),
                                      "data_type": data.get("data_type", "kv"), "created_at": _now()}
                return 200, self.datasets[did]
        if path == "/examples" and method == "GET":
            rows = [e for e in self.examples.values() if e["dataset_id"] == q.get("dataset")]
            off, lim = int(q.get("offset", 0)), int(q.get("limit", 100))
            return 200, rows[off: off + lim]
        if path == "/examples/bulk" and method == "POST":
            out = []
            for ex in data:
                eid = ex.get("id") or str(uuid.uuid4())
                split = ex.get("split")
                meta = dict(ex.get("metadata") or {})
                meta["dataset_split"] = split if isinstance(split, list) else [split or "base"]
                self.examples[eid] = {"id": eid, "dataset_id": ex["dataset_id"], "inputs": ex.get("inputs"),
                                      "outputs": ex.get("outputs"), "metadata": meta, "created_at": _now(),
                                      "modified_at": _now()}
                out.append(self.examples[eid])
            return 200, out
        if path == "/examples/bulk" and method == "PATCH":
            for upd in data:
                ex = self.examples.get(upd["id"])
                if ex is None:
                    return 404, {"detail": "no example"}
                if "inputs" in upd:
                    ex["inputs"] = upd["inputs"]
                meta = dict(upd.get("metadata") or ex["metadata"])
                if "split" in upd:
                    meta["dataset_split"] = upd["split"] if isinstance(upd["split"], list) else [upd["split"]]
                ex["metadata"], ex["modified_at"] = meta, _now()
            return 200, {"message": f"{len(data)} examples updated"}
        if path == "/sessions":
            if method == "POST":
                if any(s["name"] == data["name"] for s in self.sessions.values()):
                    return 409, {"detail": "session exists"}
                sid = data.get("id") or str(uuid.uuid4())
                self.sessions[sid] = {"id": sid, "name": data["name"], "start_time": data.get("start_time") or _now(),
                                      "tenant_id": TENANT, "reference_dataset_id": data.get("reference_dataset_id"),
                                      "extra": data.get("extra") or {}, "description": data.get("description")}
                return 200, self.sessions[sid]
            if method == "GET":
                rows = [s for s in self.sessions.values()
                        if ("name" not in q or s["name"] == q["name"])
                        and ("name_contains" not in q or q["name_contains"] in s["name"])]
                off, lim = int(q.get("offset", 0)), int(q.get("limit", 100))
                return 200, rows[off: off + lim]
        if len(parts) == 2 and parts[0] == "sessions":
            s = self.sessions.get(parts[1])
            if s is None:
                return 404, {"detail": "no session"}
            if method == "GET":
                return 200, s
            if method == "PATCH":
                if data.get("end_time"):
                    s["end_time"] = data["end_time"]
                if data.get("extra") is not None:
                    s["extra"] = data["extra"]
                return 200, s
        if path == "/runs" and method == "POST":
            sid = data.get("session_id") or next(
                (s["id"] for s in self.sessions.values() if s["name"] == data.get("session_name")), None)
            if sid is None:
                return 404, {"detail": "no such project"}
            self.runs[data["id"]] = {**data, "session_id": sid}
            return 200, {}
        if path == "/feedback" and method == "POST":
            if data.get("run_id") not in self.runs:
                return 404, {"detail": "no run"}
            self.feedback.append(data)
            return 200, {**data, "created_at": _now(), "modified_at": _now()}
        if path == "/runs/query" and method == "POST":
            sessions = set(data.get("session") or [])
            rows = [r for r in self.runs.values() if r["session_id"] in sessions
                    and (not data.get("is_root") or not r.get("parent_run_id"))]
            return 200, {"runs": rows, "cursors": {"next": None}}
        self.unknown.append(f"{method} {raw_path}")
        return 404, {"detail": "not found"}


def _serve(fake: FakeLangSmith) -> tuple[ThreadingHTTPServer, str]:
    class Handler(BaseHTTPRequestHandler):
        def _any(self) -> None:
            n = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(n) if n else b""
            with fake._lock:
                fake.requests.append((self.command, self.path, body, dict(self.headers)))
                status, payload = fake.handle(self.command, self.path, body)
            raw = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _any

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_port}"


@pytest.fixture
def fake() -> Iterator[tuple[FakeLangSmith, str]]:
    store = FakeLangSmith()
    server, url = _serve(store)
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
    cases = [_case("smoke-a", datasets=["smoke", "full"]), _case("smoke-b")]
    await _hooks(url, tmp_path).on_cases("run-1", cases)
    assert len(store.datasets) == 1 and next(iter(store.datasets.values()))["name"] == DEFAULT_DATASET
    assert sorted(e["metadata"]["slug"] for e in store.examples.values()) == ["smoke-a", "smoke-b"]
    by_slug = {e["metadata"]["slug"]: e for e in store.examples.values()}
    assert by_slug["smoke-a"]["metadata"]["dataset_split"] == ["smoke-a", "smoke", "full"]
    assert by_slug["smoke-a"]["inputs"]["case"]["conversation"][0]["text"].startswith("Build a workflow")

    # the same cases again: nothing is written to the dataset
    await _hooks(url, tmp_path).on_cases("run-2", cases)
    assert store.calls("POST", "/examples/bulk") == 1 and store.calls("PATCH", "/examples/bulk") == 0
    assert len(store.examples) == 2 and store.calls("POST", "/datasets") == 1

    # one case changed, one added: the changed one is updated in place, the new one created
    changed = [_case("smoke-a", prompt="Build a workflow that greets only adults.", datasets=["smoke"]), _case("smoke-b"),
               _case("smoke-c")]
    await _hooks(url, tmp_path).on_cases("run-3", changed)
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
    hooks = _hooks(url, tmp_path)
    assert hooks.client.tracing_queue is None  # synchronous writes: no background batching thread
    await hooks.on_cases("run-1", [_case("smoke-a")])
    (session,) = store.sessions.values()
    assert session["reference_dataset_id"] == next(iter(store.datasets))
    assert session["extra"]["metadata"]["run_id"] == "run-1"
    ok = unit("smoke-a", 0, {"happy-path": True}, {"The workflow greets": True}, cost=0.25, turns=7)
    bad = unit("smoke-a", 1, {"happy-path": False}, cost=0.5, turns=9, reason=f"the MCP call with {mcp_key} failed")
    await hooks.on_unit(ok)
    await hooks.on_unit(bad)

    assert len(store.runs) == 2
    runs = {r["name"]: r for r in store.runs.values()}
    assert runs["smoke-a#0"]["reference_example_id"] == next(iter(store.examples))
    assert runs["smoke-a#0"]["outputs"]["verdicts"] == {"happy-path": "pass"}
    assert runs["smoke-a#0"]["outputs"]["workflow_id"] == "wf1"
    assert runs["smoke-a#0"]["outputs"]["expectation_results"][0]["text"] == "The workflow greets"
    fb = {(f["run_id"], f["key"]): f for f in store.feedback}
    ok_id, bad_id = runs["smoke-a#0"]["id"], runs["smoke-a#1"]["id"]
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
    stale = store.add_session("instance-ai-baseline-0000aaaa", old - dt.timedelta(days=1))
    newest = store.add_session("instance-ai-baseline-7abc1234", old)
    store.add_session("someone-else-1234", old + dt.timedelta(days=1))  # newer, but not a baseline
    hooks = _hooks(url, tmp_path)
    baseline_units = [unit("smoke-a", i, {"happy-path": True}) for i in range(5)]
    from orchestrator.experiments.langsmith_sync import unit_outputs

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
    assert comparison["baseline_run_id"] == "instance-ai-baseline-7abc1234"
    (u,) = comparison["units"]
    assert u["key"] == "smoke-a/happy-path" and u["baseline"] == {"passes": 5, "total": 5, "rate": 1.0}
    assert u["pr"]["passes"] == 0 and u["tier"] == "regression"
    assert hooks.baseline is not None and len(hooks.baseline.units) == 5
    assert results.config["langsmith"]["baseline"] == "instance-ai-baseline-7abc1234"
    own = next(s for s in store.sessions.values() if s["name"].startswith("pr-123-"))
    assert own["end_time"] is not None
    assert store.unknown == []


async def test_baseline_run_itself_and_no_baseline_skip(fake, tmp_path: Path) -> None:
    store, url = fake
    hooks = _hooks(url, tmp_path)
    await hooks.on_cases("run-1", [_case("smoke-a")])
    assert await hooks.on_finish(_results("run-1", [unit("smoke-a", 0, {"happy-path": True})])) is None  # none yet

    store.add_session("instance-ai-baseline-old00000", dt.datetime.now(dt.UTC) - dt.timedelta(days=1))
    creating = _hooks(url, tmp_path, experiment_name="instance-ai-baseline")
    await creating.on_cases("run-2", [_case("smoke-a")])
    await creating.on_unit(unit("smoke-a", 0, {"happy-path": True}))
    assert await creating.on_finish(_results("run-2", [unit("smoke-a", 0, {"happy-path": True})])) is None
    assert creating.failures == [] and hooks.failures == []


async def test_server_error_everywhere_leaves_the_run_unaffected(tmp_path: Path, caplog) -> None:
    store = FakeLangSmith(fail_all=True)
    server, url = _serve(store)
    try:
        hooks = _hooks(url, tmp_path)
        start = time.monotonic()
        assert await hooks.on_cases("run-1", [_case("smoke-a")]) is None
        assert await hooks.on_unit(unit("smoke-a", 0, {"happy-path": True})) is None
        assert await hooks.on_finish(_results("run-1", [unit("smoke-a", 0, {"happy-path": True})])) is None
        assert time.monotonic() - start < 20
    finally:
        server.shutdown()
        server.server_close()
    assert hooks.experiment is None and len(hooks.failures) == 2
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
    repo = Path(__file__).resolve().parents[1]
    local = default_experiment_name({}, repo)
    assert local.startswith("local-") and "unknown" not in local


def test_feedback_leaves_out_incomplete_verdicts() -> None:
    keys = [f.key for f in unit_feedback(unit("c", 0, {"s1": True, "s2": None}, {"e": None}))]
    assert keys == ["scenario.s1", "unit_pass", "build_cost_usd", "build_turns"]


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
