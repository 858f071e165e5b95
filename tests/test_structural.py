"""Deterministic checks of a built workflow's JSON."""

from __future__ import annotations

from orchestrator.verify.structural import structural_checks


def _wf(nodes, connections):
    return {"nodes": nodes, "connections": connections}


TRIGGER = {"name": "Start", "type": "n8n-nodes-base.manualTrigger", "parameters": {}}
SET = {"name": "Set", "type": "n8n-nodes-base.set", "parameters": {}}


def _by_name(checks):
    return {c.name: c for c in checks}


def test_connected_workflow_passes_every_check() -> None:
    wf = _wf([TRIGGER, SET], {"Start": {"main": [[{"node": "Set", "type": "main", "index": 0}]]}})
    assert all(c.passed for c in structural_checks(wf))


def test_orphan_node_and_missing_trigger_are_named() -> None:
    orphan = _by_name(structural_checks(_wf([TRIGGER, SET], {})))
    assert orphan["all_nodes_reachable"].passed is False and "Set" in orphan["all_nodes_reachable"].detail
    no_trigger = _by_name(structural_checks(_wf([SET], {})))
    assert no_trigger["has_trigger"].passed is False
    assert no_trigger["all_nodes_reachable"].passed is None  # nothing to start from: not applicable


def test_literal_secret_in_parameters_fails_but_expressions_do_not() -> None:
    http = {"name": "HTTP", "type": "n8n-nodes-base.httpRequest",
            "parameters": {"headers": {"Authorization": "Bearer abcdefghijklmnopqrstu"}}}
    expr = {"name": "HTTP2", "type": "n8n-nodes-base.httpRequest", "parameters": {"apiKey": "={{ $env.KEY_FROM_ENV }}"}}
    conn = {"Start": {"main": [[{"node": "HTTP", "type": "main", "index": 0}, {"node": "HTTP2", "type": "main", "index": 0}]]}}
    checks = _by_name(structural_checks(_wf([TRIGGER, http, expr], conn)))
    assert checks["no_hardcoded_credentials"].passed is False
    assert "HTTP.headers.Authorization" in checks["no_hardcoded_credentials"].detail
    assert "HTTP2" not in checks["no_hardcoded_credentials"].detail
