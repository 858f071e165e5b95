"""RunMetrics over a real /metrics endpoint and a real push to a loopback HTTP server."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import ClassVar

import httpx
import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from orchestrator.gateway.attribution import STAGES
from orchestrator.gateway.ledger import OUTCOMES
from orchestrator.gateway.proxy import PROBE_STAGE
from orchestrator.lanes.model import LaneState
from orchestrator.metrics.prometheus import CLEANUP_KINDS, TOKEN_KINDS, RunMetrics
from orchestrator.results.scoring import UnitOutcome


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _exercise(m: RunMetrics) -> None:
    m.lane_state({LaneState.ready: 2, "starting": 1})
    m.lane_up(12.0)
    m.lane_up(70.0)
    m.unit_queued(5)
    for _ in range(3):
        m.unit_started()
    m.unit_finished(UnitOutcome.passed, build_s=100.0, verify_s=20.0, cost=0.25, turns=12)
    m.unit_finished("failed", build_s=400.0, verify_s=40.0, cost=0.5, turns=30)
    m.unit_skipped()
    m.outage_retry()
    m.outage_retry()
    m.cleanup_failed("workflow")
    m.cleanup_failed("wf-8HqZ secret-looking kind")  # not a known kind: counted as "other"
    m.stolen()
    m.model_call("build", "ok", 0.02, {"input": 100, "output": 5, "cache_read": 900}, 0.3)
    m.model_call("wf-8HqZ stage", "wf-8HqZ outcome", 0.01, {"wf-8HqZ": 7}, 0.0)  # unknown: "other", never the value
    m.provider_state(False)
    m.provider_state(False)  # the same outage
    m.provider_state(True)
    m.concurrency_cap(6)


@pytest.fixture
def metrics() -> Iterator[RunMetrics]:
    yield RunMetrics()


def test_scrape_real_endpoint(metrics: RunMetrics) -> None:
    _exercise(metrics)
    endpoint = metrics.serve(0)
    try:
        assert endpoint.addr == "127.0.0.1" and endpoint.port > 0
        response = httpx.get(endpoint.url, timeout=5)
    finally:
        endpoint.close()
    assert response.status_code == 200
    s = _samples(response.text)

    assert s[("n8n_eval_lanes", (("state", "ready"),))] == 2
    assert s[("n8n_eval_lanes", (("state", "starting"),))] == 1
    assert s[("n8n_eval_lanes", (("state", "dead"),))] == 0
    assert s[("n8n_eval_lane_bringup_seconds_count", ())] == 2
    assert s[("n8n_eval_lane_bringup_seconds_sum", ())] == 82.0
    assert s[("n8n_eval_lane_bringup_seconds_bucket", (("le", "60.0"),))] == 1
    assert s[("n8n_eval_units_queued", ())] == 1  # 5 queued − 3 started − 1 skipped
    assert s[("n8n_eval_units_in_flight", ())] == 1  # 3 started − 2 finished
    assert s[("n8n_eval_units_done_total", (("outcome", "passed"),))] == 1
    assert s[("n8n_eval_units_done_total", (("outcome", "failed"),))] == 1
    assert s[("n8n_eval_units_done_total", (("outcome", "skipped"),))] == 1
    assert s[("n8n_eval_units_done_total", (("outcome", "lane_failure"),))] == 0
    assert s[("n8n_eval_build_seconds_sum", ())] == 500.0
    assert s[("n8n_eval_build_seconds_bucket", (("le", "120.0"),))] == 1
    assert s[("n8n_eval_verify_seconds_count", ())] == 2
    assert s[("n8n_eval_build_cost_usd_total", ())] == pytest.approx(0.75)
    assert s[("n8n_eval_build_turns_total", ())] == 42
    assert s[("n8n_eval_provider_outage_retries_total", ())] == 2
    assert s[("n8n_eval_cleanup_failures_total", (("kind", "workflow"),))] == 1
    assert s[("n8n_eval_cleanup_failures_total", (("kind", "other"),))] == 1
    assert s[("n8n_eval_steals_total", ())] == 1
    assert s[("n8n_eval_model_calls_total", (("result", "ok"), ("stage", "build")))] == 1
    assert s[("n8n_eval_model_calls_total", (("result", "other"), ("stage", "other")))] == 1
    assert s[("n8n_eval_model_cost_usd_total", (("stage", "build"),))] == pytest.approx(0.02)
    assert s[("n8n_eval_model_tokens_total", (("stage", "build"), ("type", "cache_read")))] == 900
    assert s[("n8n_eval_provider_outages_total", ())] == 1 and s[("n8n_eval_provider_up", ())] == 1
    assert s[("n8n_eval_build_concurrency", ())] == 6


def test_label_values_stay_in_closed_sets(metrics: RunMetrics) -> None:
    _exercise(metrics)
    endpoint = metrics.serve(0)
    try:
        text = httpx.get(endpoint.url, timeout=5).text
    finally:
        endpoint.close()
    allowed = {
        "state": {s.value for s in LaneState},
        "outcome": {o.value for o in UnitOutcome},
        "kind": set(CLEANUP_KINDS),
        # the model gateway's (issue 37): stages, how a call ended, token types — never a unit
        "stage": {*STAGES, PROBE_STAGE, "other"},
        "result": {*OUTCOMES, "other"},
        "type": set(TOKEN_KINDS),
    }
    for family in text_string_to_metric_families(text):
        if not family.name.startswith("n8n_eval_"):
            continue
        for sample in family.samples:
            for label, value in sample.labels.items():
                if label == "le":
                    continue
                assert value in allowed[label], (sample.name, label, value)
    assert "wf-8HqZ" not in text
    with pytest.raises(ValueError):
        metrics.unit_finished("exploded")
    with pytest.raises(ValueError):
        metrics.lane_state({"on-fire": 1})


def test_own_registry_not_the_global_one() -> None:
    a, b = RunMetrics(), RunMetrics()  # a second instance must not clash on names
    a.stolen()
    assert b.registry.get_sample_value("n8n_eval_steals_total") == 0
    assert REGISTRY.get_sample_value("n8n_eval_steals_total") is None


class _Recorder(BaseHTTPRequestHandler):
    requests: ClassVar[list[tuple[str, str, bytes]]] = []

    def _record(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        type(self).requests.append((self.command, self.path, self.rfile.read(length)))
        self.send_response(200)
        self.end_headers()

    do_PUT = do_POST = _record

    def log_message(self, *args: object) -> None:
        pass


def test_push_sends_the_registry(metrics: RunMetrics) -> None:
    _Recorder.requests = []
    server = HTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        metrics.stolen()
        metrics.unit_queued(4)
        ok = metrics.push(f"http://127.0.0.1:{server.server_port}", job="n8n-eval", grouping_key={"run": "r-42"})
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    assert ok
    [(method, path, body)] = _Recorder.requests
    assert method == "PUT"
    assert path == "/metrics/job/n8n-eval/run/r-42"
    s = _samples(body.decode())
    assert s[("n8n_eval_steals_total", ())] == 1
    assert s[("n8n_eval_units_queued", ())] == 4


def test_push_failure_is_logged_not_raised(metrics: RunMetrics, caplog: pytest.LogCaptureFixture) -> None:
    server = HTTPServer(("127.0.0.1", 0), _Recorder)
    port = server.server_port
    server.server_close()  # nothing listens there now
    with caplog.at_level(logging.WARNING, logger="orchestrator.metrics.prometheus"):
        assert metrics.push(f"http://127.0.0.1:{port}", job="n8n-eval", timeout=2) is False
    assert any("metrics push" in r.getMessage() for r in caplog.records)


async def test_teardown_failures_are_counted_under_their_resource_kind(tmp_path) -> None:
    """What teardown reports still open (the ledger's view) reaches the metric by resource kind —
    not by lane id, which would land every failure under ``other``."""
    from orchestrator.deletion import delete_one, open_failures
    from orchestrator.ledger import Ledger
    from orchestrator.n8n.errors import http_error
    from orchestrator.run.observers import MetricsObserver

    class Refusing:  # an n8n session whose deletes answer 500 (the shape N8nClient raises)
        async def delete_credential(self, credential_id: str) -> bool:
            raise http_error("DELETE", f"/rest/credentials/{credential_id}", 500, "database is locked")

    ledger = Ledger.for_run("metrics-kinds", tmp_path)
    ledger.created("lane", "p0", lane="p0")
    ledger.created("workflow", "wf-1", lane="p0")
    ledger.created("credential", "cred-1", lane="p0")
    failed = await delete_one(ledger, Refusing(), "credential", "cred-1", "p0")
    assert failed is not None and failed.kind.value == "credential" and "500" in str(failed)
    m = RunMetrics()
    observer = MetricsObserver(m)
    for failure in open_failures(ledger):
        observer.on_cleanup_failure(failure)
    s = _samples(_scrape(m))
    assert s[("n8n_eval_cleanup_failures_total", (("kind", "workflow"),))] == 1
    assert s[("n8n_eval_cleanup_failures_total", (("kind", "credential"),))] == 1
    assert s[("n8n_eval_cleanup_failures_total", (("kind", "other"),))] == 0


def _scrape(m: RunMetrics) -> str:
    endpoint = m.serve(0)
    try:
        return httpx.get(endpoint.url, timeout=5).text
    finally:
        endpoint.close()
