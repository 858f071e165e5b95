"""One build attempt with the REAL claude CLI against a REAL n8n lane's MCP server; the model is the
scripted loopback server (the only stand-in allowed)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.lanes import SeededLane, StartedLane, seed
from support.polling import eventually_async

from orchestrator.builders.claude.runner import (
    AttemptResult,
    ClaudeConfig,
    _terminate,
    claude_env,
    mcp_config_json,
    run_build_attempt,
    should_retry_attempt,
)
from orchestrator.builders.claude.trailer import last_workflow_id
from orchestrator.outage import (
    OutageInfo,
    classify_cli_text,
    classify_result_event,
    retry_provider_outage,
)
from orchestrator.scripted import scripts as ms
from orchestrator.scripted.server import ScriptedModelServer

API_KEY = "sk-test-runner-api-key-0001"
CREATE_TOOL = "mcp__n8n-local__create_workflow_from_code"


# ------------------------------------------------------------------------------------------------
# pure parts: trailer and outage text (no claude needed)



# The allocator retries a unit on another lane while the builder says so; this loop plays that
# part for one lane, so the retry policy (``should_retry_attempt``) is tested against real claude.
@dataclass(frozen=True)
class BuildOutcome:
    attempts: list[AttemptResult]
    workflow_id: str | None
    cost_usd: float
    turns: int
    duration_s: float

    @property
    def last(self) -> AttemptResult:
        return self.attempts[-1]

    @property
    def outage(self) -> OutageInfo | None:
        return self.last.outage




AttemptFn = Callable[[int], Awaitable[AttemptResult]]


async def build_attempts(run_attempt: AttemptFn, max_attempts: int = 3) -> BuildOutcome:
    """Call ``run_attempt(n)`` (n = 1, 2, …) until an id comes back or a retry is not warranted.

    The caller picks the lane for each attempt (a retry should prefer another lane).
    """
    if max_attempts < 1:
        raise ValueError("max_attempts must be at least 1")
    attempts: list[AttemptResult] = []
    for number in range(1, max_attempts + 1):
        result = await run_attempt(number)
        attempts.append(result)
        if not should_retry_attempt(result):
            break
    return BuildOutcome(
        attempts=attempts,
        workflow_id=attempts[-1].workflow_id,
        cost_usd=sum(a.cost_usd for a in attempts),
        turns=sum(a.turns for a in attempts),
        duration_s=sum(a.duration_s for a in attempts),
    )


def test_last_trailer_wins():
    assert last_workflow_id("draft WORKFLOW_ID=abc\nfinal:\nWORKFLOW_ID=Xy_9-z") == "Xy_9-z"
    assert last_workflow_id("no id here") is None
    assert last_workflow_id(None) is None
    assert last_workflow_id("WORKFLOW_ID=") is None


@pytest.mark.parametrize(
    "text,kind,status",
    [  # the texts claude 2.1.328 printed against the scripted server
        ("API Error: Repeated 529 Overloaded errors. The API is at capacity — this is usually temporary.",
         "overloaded", 529),
        ("API Error: 529 Overloaded. This is a server-side issue, usually temporary — try again in a moment.",
         "overloaded", 529),
        ("API Error: Request rejected (429) · Number of request tokens has exceeded your per-minute rate limit",
         "rate_limited", 429),
        ("API Error: 500 Internal server error. This is a server-side issue, usually temporary", "server_error", 500),
        ("API Error: 502 Internal server error.", "server_error", 502),
        ("API Error: 503 Internal server error.", "server_error", 503),
        ("API Error: Connection refused — a firewall or proxy may be blocking it (ECONNREFUSED)", "connection", None),
    ],
)
def test_cli_outage_texts(text, kind, status):
    info = classify_cli_text(text)
    assert info is not None and (info.kind, info.status, info.source) == (kind, status, "claude")


@pytest.mark.parametrize(
    "text",
    [
        "API Error: 400 invalid_request_error",
        "Failed to authenticate. API Error: 401 authentication_error",
        "API Error: JSON Parse error: Unexpected identifier",
        # the built workflow's own (mocked) traffic is not a provider outage
        "Built it.\nTool errors: HTTP Request node got 500 Internal server error, then 529 overloaded_error\n"
        "WORKFLOW_ID=abc",
        "The Slack API returned 429 rate_limit_error during the test run.",
    ],
)
def test_non_outage_texts(text):
    assert classify_cli_text(text) is None
    assert classify_result_event({"type": "result", "is_error": False, "result": text}) is None


def test_result_event_structured_fields_win():
    event = {"type": "result", "is_error": True, "api_error_status": 529, "api_error_type": "overloaded_error",
             "result": "something reworded"}
    info = classify_result_event(event)
    assert info is not None and info.status == 529 and info.kind == "overloaded"
    assert classify_result_event({"type": "result", "is_error": True, "api_error_status": 401,
                                  "result": "Failed to authenticate. API Error: 401"}) is None


def _attempt(workflow_id: str | None = None, *, outage: OutageInfo | None = None, timed_out: bool = False,
             cost: float = 0.5, turns: int = 2) -> AttemptResult:
    return AttemptResult(workflow_id, cost, turns, 1.0, 0, timed_out, workflow_id is None, None, outage, None)


async def test_retry_provider_outage_on_attempt_results():
    naps: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        naps.append(seconds)

    outage = OutageInfo("overloaded", 529, "API Error: 529", "claude")
    results = iter([_attempt(outage=outage), _attempt(outage=outage), _attempt(outage=outage)])
    last = await retry_provider_outage(lambda: next(results), waits=(30, 90), sleep=fake_sleep)
    assert naps == [30, 90] and last.outage == outage  # after the last wait the outage comes back as such

    naps.clear()
    results = iter([_attempt(outage=outage), _attempt("wf1")])
    assert (await retry_provider_outage(lambda: next(results), sleep=fake_sleep)).workflow_id == "wf1"
    assert naps == [30]

    naps.clear()
    assert (await retry_provider_outage(lambda: _attempt(None), sleep=fake_sleep)).outage is None
    assert naps == []  # a failed build is not an outage


async def test_build_attempts_policy_without_claude():
    seen: list[int] = []

    def runner(results: list[AttemptResult]):
        async def run(n: int) -> AttemptResult:
            seen.append(n)
            return results[n - 1]
        return run

    outcome = await build_attempts(runner([_attempt(None), _attempt(None), _attempt("wf")]))
    assert outcome.workflow_id == "wf" and len(outcome.attempts) == 3
    assert outcome.cost_usd == pytest.approx(1.5) and outcome.turns == 6
    for stop_early in (_attempt(timed_out=True), _attempt(outage=OutageInfo("overloaded", 529, "", "claude"))):
        seen.clear()
        outcome = await build_attempts(runner([stop_early, _attempt("wf")]))
        assert seen == [1] and outcome.workflow_id is None


async def test_spawn_error_is_reported_and_not_retried(tmp_path):
    cfg = ClaudeConfig(tmp_path / "no-such-claude", api_key=API_KEY, base_url="http://127.0.0.1:9", work_root=tmp_path,
                       timeout_ms=60_000)
    calls = 0

    async def run(n: int) -> AttemptResult:
        nonlocal calls
        calls += 1
        return await run_build_attempt("x", "http://127.0.0.1:9", "mcp-key-spawn-test-000", cfg)

    outcome = await build_attempts(run)
    assert calls == 1 and outcome.last.spawn_failed and outcome.last.exit_code is None
    assert "could not start claude" in (outcome.last.error_text or "")
    assert list(tmp_path.iterdir()) == []  # staged dir removed


async def test_terminate_escalates_to_sigkill_for_the_whole_group():
    code = (
        "import signal, subprocess, sys, threading\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "child = subprocess.Popen([sys.executable, '-c', "
        "'import signal, threading; signal.signal(signal.SIGTERM, signal.SIG_IGN); threading.Event().wait(60)'])\n"
        "print(child.pid, flush=True)\n"
        "threading.Event().wait(60)\n"
    )
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", code, stdout=asyncio.subprocess.PIPE,
                                                start_new_session=True)
    assert proc.stdout is not None
    child_pid = int((await proc.stdout.readline()).decode())
    started = time.monotonic()
    await _terminate(proc, grace_s=0.5)
    assert time.monotonic() - started >= 0.4  # the grace first; then SIGKILL, as SIGTERM was ignored
    assert proc.returncode == -signal.SIGKILL
    await eventually_async(lambda: not _alive(child_pid), what="the group's other process killed too")


def test_claude_env_is_clean_and_quiet(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "leak-me-please")
    monkeypatch.setenv("CLAUDE_CODE_OAUTH_TOKEN", "leak-me-too")
    cfg = ClaudeConfig(Path("claude"), api_key=API_KEY, base_url="http://127.0.0.1:1", mcp_timeout_ms=1234,
                       max_retries=0, timeout_ms=60_000)
    env = claude_env(cfg, tmp_path)
    assert env["HOME"] == str(tmp_path) and env["MCP_TIMEOUT"] == "1234"
    assert env["ANTHROPIC_MODEL"] == "claude-opus-4-8" and env["CLAUDE_CODE_MAX_RETRIES"] == "0"
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1" and env["DISABLE_AUTOUPDATER"] == "1"
    assert "ANTHROPIC_AUTH_TOKEN" not in env and "CLAUDE_CODE_OAUTH_TOKEN" not in env
    assert ClaudeConfig.from_env(Path("c"), {}, timeout_ms=1).model == "claude-opus-4-8"
    assert ClaudeConfig.from_env(Path("c"), {"ANTHROPIC_MODEL": "m1"}, timeout_ms=1).model == "m1"
    assert mcp_config_json("http://l:1/", "k")["mcpServers"]["n8n-local"] == {
        "type": "http", "url": "http://l:1/mcp-server/http", "headers": {"Authorization": "Bearer k"}}


# ------------------------------------------------------------------------------------------------
# real claude + real lane


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def _group_members(pgid: int) -> set[int]:
    members: set[int] = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    fields = fh.read().split(") ", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[0] != "Z" and int(fields[2]) == pgid:
                members.add(int(entry))
    return members


def _pids_mentioning(fragment: str) -> set[int]:
    """Live processes whose command line mentions ``fragment`` (the staged dir of a build)."""
    found: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                if fragment.encode() in fh.read() and _alive(int(entry)):
                    found.add(int(entry))
        except OSError:
            continue
    return found


@pytest.fixture(scope="module")
def lane(shared_plain_lane: StartedLane) -> SeededLane:
    return seed(shared_plain_lane)  # reset and seeded for this module


def config(claude_bin: Path, srv: ScriptedModelServer, tmp_path: Path, **kw: Any) -> ClaudeConfig:
    kw.setdefault("timeout_ms", 120_000)
    kw.setdefault("max_retries", 0)
    return ClaudeConfig(claude_bin, api_key=API_KEY, base_url=srv.base_url, work_root=tmp_path, **kw)


@pytest.mark.claude
@pytest.mark.n8n
async def test_mcp_builder_creates_a_workflow_on_the_lane(claude_bin, lane, tmp_path):
    with ScriptedModelServer(ms.mcp_builder()) as srv:
        result = await run_build_attempt("Build a hello workflow.", lane.base_url, lane.mcp_key,
                                         config(claude_bin, srv, tmp_path))
        requests = srv.requests
    assert result.workflow_id, result
    assert not result.is_error and result.exit_code == 0 and result.outage is None and not result.timed_out
    assert result.cost_usd > 0 and result.turns >= 2 and result.subtype == "success"
    assert result.raw_result_text and result.raw_result_text.endswith(f"WORKFLOW_ID={result.workflow_id}")
    # the CLI only talked to the Messages API (no start-up probe with the quiet env), with our model
    assert {(r.method, r.path) for r in requests} == {("POST", "/v1/messages")}
    assert {r.body["model"] for r in requests} == {"claude-opus-4-8"}
    assert any(CREATE_TOOL in ms.tool_names(r.body) for r in requests)
    with lane.owner_client() as owner:
        got = owner.get(f"/rest/workflows/{result.workflow_id}")
    assert got.status_code == 200
    wf = got.json()["data"]
    assert wf["name"] == "Scripted hello"
    assert sorted(n["type"] for n in wf["nodes"]) == ["n8n-nodes-base.manualTrigger", "n8n-nodes-base.set"]


@pytest.mark.claude
@pytest.mark.n8n
async def test_mcp_builder_falls_back_after_a_tool_error(claude_bin, lane, tmp_path):
    with ScriptedModelServer(ms.mcp_builder(code="export default nonsense(")) as srv:
        result = await run_build_attempt("Build it.", lane.base_url, lane.mcp_key, config(claude_bin, srv, tmp_path))
        last_request = srv.message_requests[-1].body
    assert result.workflow_id
    calls = ms.tool_calls(last_request, CREATE_TOOL)
    first_result = calls[0][1]
    assert len(calls) == 2 and first_result is not None and ms.created_workflow_id(first_result) is None
    with lane.owner_client() as owner:
        assert owner.get(f"/rest/workflows/{result.workflow_id}").json()["data"]["name"] == "Scripted minimal"


@pytest.mark.claude
@pytest.mark.n8n
async def test_no_trailer_is_retried_up_to_max_attempts(claude_bin, lane, tmp_path):
    with ScriptedModelServer(ms.no_trailer()) as srv:
        cfg = config(claude_bin, srv, tmp_path)
        outcome = await build_attempts(
            lambda n: run_build_attempt(f"attempt {n}", lane.base_url, lane.mcp_key, cfg), max_attempts=3
        )
        assert srv.count("/v1/messages") == 3
    assert len(outcome.attempts) == 3 and outcome.workflow_id is None
    assert all(a.error_text == "no WORKFLOW_ID= trailer in claude's answer" and not a.is_error for a in outcome.attempts)
    assert all(a.cost_usd > 0 and a.turns == 1 for a in outcome.attempts)
    assert outcome.cost_usd == pytest.approx(sum(a.cost_usd for a in outcome.attempts))
    assert outcome.turns == 3


@pytest.mark.claude
async def test_hung_model_is_killed_at_the_timeout(claude_bin, tmp_path):
    seen_pids: set[int] = set()
    groups: set[int] = set()
    staged: list[Path] = []

    def on_event(event: dict[str, Any]) -> None:
        if event.get("type") == "system" and event.get("subtype") == "init":
            staged.extend(tmp_path.glob("claude-build-*"))
            seen_pids.update(_pids_mentioning(str(staged[0])))
            groups.update(os.getpgid(p) for p in seen_pids)

    with ScriptedModelServer(ms.hang(120)) as srv:
        started = time.monotonic()
        result = await run_build_attempt("hang", "http://127.0.0.1:9", "mcp-key-hang-test-000",
                                         config(claude_bin, srv, tmp_path, timeout_ms=3000, kill_grace_s=2),
                                         on_event=on_event)
        elapsed = time.monotonic() - started
        assert srv.count("/v1/messages") >= 1
    assert result.timed_out and result.is_error and result.workflow_id is None and result.outage is None
    assert "timed out" in (result.error_text or "")
    assert elapsed >= 3  # not before its budget; killed after it: timed_out, and nothing of it left below
    assert seen_pids, "claude was not seen running"
    assert not any(_alive(p) for p in seen_pids)
    assert groups and not any(_group_members(g) for g in groups)  # claude leads its own group; all gone
    assert staged and not staged[0].exists()
    assert not _pids_mentioning(str(staged[0]))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.claude
@pytest.mark.parametrize("status,kind", [(529, "overloaded"), (429, "rate_limited"), (500, "server_error")])
async def test_provider_storm_is_classified_as_outage(claude_bin, tmp_path, status, kind):
    with ScriptedModelServer(ms.status_storm(status)) as srv:
        result = await run_build_attempt("storm", "http://127.0.0.1:9", "mcp-key-storm-test-000",
                                         config(claude_bin, srv, tmp_path, max_retries=1))
        hits = srv.count("/v1/messages")
    assert result.outage is not None, result
    assert (result.outage.kind, result.outage.status, result.outage.source) == (kind, status, "claude")
    assert result.is_error and result.workflow_id is None and result.exit_code == 1
    assert (result.raw_result_text or "").startswith("API Error:")
    assert hits == 2  # CLAUDE_CODE_MAX_RETRIES=1 bounds the CLI's own retries


@pytest.mark.claude
@pytest.mark.n8n
async def test_outage_retry_policy_recovers_a_build(claude_bin, lane, tmp_path):
    naps: list[float] = []

    async def short_sleep(seconds: float) -> None:
        naps.append(seconds)

    script = ms.status_storm(529, count=2, then=ms.mcp_builder())
    with ScriptedModelServer(script) as srv:
        cfg = config(claude_bin, srv, tmp_path)
        result = await retry_provider_outage(
            lambda: run_build_attempt("build", lane.base_url, lane.mcp_key, cfg), waits=(30, 90), sleep=short_sleep
        )
    assert naps == [30, 90]
    assert result.outage is None and result.workflow_id


@pytest.mark.claude
@pytest.mark.n8n
async def test_staged_config_is_private_and_secrets_never_leak(claude_bin, lane, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    observed: dict[str, Any] = {}
    events: list[dict[str, Any]] = []

    def on_event(event: dict[str, Any]) -> None:
        events.append(event)
        if event.get("type") == "system" and event.get("subtype") == "init":
            (root,) = tmp_path.glob("claude-build-*")
            cfg_file = root / "mcp-config.json"
            observed.update(root=root, root_mode=root.stat().st_mode & 0o777,
                            cfg_mode=cfg_file.stat().st_mode & 0o777,
                            cfg_has_key=lane.mcp_key in cfg_file.read_text(),
                            home=(root / "home" / ".claude" / "settings.json").read_text())

    with ScriptedModelServer(ms.mcp_builder()) as srv:
        result = await run_build_attempt("Build a hello workflow.", lane.base_url, lane.mcp_key,
                                         config(claude_bin, srv, tmp_path), on_event=on_event)
        recorded = repr(srv.requests)
    assert result.workflow_id
    assert observed["root_mode"] == 0o700 and observed["cfg_mode"] == 0o600 and observed["cfg_has_key"]
    assert "enableAllProjectMcpServers" in observed["home"]
    assert not observed["root"].exists() and list(tmp_path.iterdir()) == []
    for text in (repr(result), repr(events), caplog.text, recorded):
        assert lane.mcp_key not in text
        assert API_KEY not in text
    assert any(e.get("type") == "result" for e in events)
