"""The REST and MCP clients against one real n8n 2.41.1 lane (started once for this module).

The lane's model calls (hint generation and service mocks of ``execute-with-llm-mock``) go to a
scripted Anthropic-compatible server on loopback via ``N8N_INSTANCE_AI_MODEL_URL``.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from support.lanes import StartedLane, closed_port, process_lane
from support.mcp_client import LaneMcpClient, McpAuthError, McpToolError

from orchestrator.lanes.fingerprint import fetch_fingerprint
from orchestrator.n8n.errors import N8nHTTPError, N8nTransportError
from orchestrator.n8n.invitations import INVITE_RATE_LIMIT
from orchestrator.n8n.owner import OwnerCredentials
from orchestrator.n8n.rest import N8nClient, RetryPolicy
from orchestrator.redact import MASK, register_secret
from orchestrator.scripted.replies import Action, Reply, TextBlock, ToolUseBlock
from orchestrator.scripted.server import ScriptedModelServer

pytestmark = pytest.mark.n8n

MODEL_KEY = "sk-scripted-lane-key-" + secrets.token_hex(4)
MOCK_BODY = {"users": [{"id": 7, "name": "Ada"}]}
TRIGGER_OUTPUT = {"kind": "manual", "n": 1}


def lane_model(request: dict[str, Any]) -> Action:
    """Hint generation gets a JSON plan; a service mock gets one ``submit_response`` call."""
    tools = [t.get("name") for t in request.get("tools") or []]
    last = (request.get("messages") or [{}])[-1]
    answered = isinstance(last.get("content"), list) and any(
        isinstance(c, dict) and c.get("type") == "tool_result" for c in last["content"]
    )
    if "submit_response" in tools:
        if answered:
            return Reply([TextBlock("submitted")])
        return Reply([ToolUseBlock("submit_response", {"type": "json", "body": MOCK_BODY})])
    plan = {"globalContext": "scripted scenario", "nodeHints": {}, "triggerContent": TRIGGER_OUTPUT}
    return Reply([TextBlock(json.dumps(plan))])


@dataclass(frozen=True)
class Seeded:
    lane: StartedLane
    model: ScriptedModelServer
    owner: OwnerCredentials
    admin: OwnerCredentials
    chat: OwnerCredentials
    start_users: frozenset[str]


@pytest.fixture(scope="module")
def seeded() -> Iterator[Seeded]:
    owner = OwnerCredentials("owner@rest-test.invalid", "Own3r-" + secrets.token_urlsafe(12))
    admin = OwnerCredentials("admin@rest-test.invalid", "Adm1n-" + secrets.token_urlsafe(12), "Eval", "Admin")
    chat = OwnerCredentials("chat@rest-test.invalid", "Ch4t-" + secrets.token_urlsafe(12), "Eval", "Chat")
    with ScriptedModelServer(lane_model) as model:
        # with its editor, as docker and Kubernetes lanes run: the full settings the fingerprint reads
        env = {"N8N_INSTANCE_AI_MODEL_URL": model.base_url, "N8N_INSTANCE_AI_MODEL_API_KEY": MODEL_KEY,
               "N8N_DISABLE_UI": "false"}
        with process_lane(env) as lane:

            async def reset() -> frozenset[str]:
                async with N8nClient(lane.base_url) as client:
                    await client.e2e_reset(owner, admin=admin, chat=chat)
                    session = await client.login(owner.email, owner.password)
                    return frozenset(u["email"] for u in await session.list_users())

            yield Seeded(lane, model, owner, admin, chat, asyncio.run(reset()))


@pytest.mark.slow
async def test_invitations_are_rate_limited_in_production_mode() -> None:
    """Runs first, on its own lane, before the module lane starts (one lane at a time)."""
    owner = OwnerCredentials("owner@limit-test.invalid", "Own3r-" + secrets.token_urlsafe(12))
    others = {
        "admin": OwnerCredentials("admin@limit-test.invalid", "Adm1n-" + secrets.token_urlsafe(12)),
        "chat": OwnerCredentials("chat@limit-test.invalid", "Ch4t-" + secrets.token_urlsafe(12)),
    }
    with process_lane({"NODE_ENV": "production"}) as lane:
        async with N8nClient(lane.base_url) as client:
            await client.e2e_reset(owner, **others)
            session = await client.login(owner.email, owner.password)
            for i in range(INVITE_RATE_LIMIT):
                await session.invite([f"limit-{i}@limit-test.invalid"], rate_limit_waits=0)
            with pytest.raises(N8nHTTPError) as limited:
                await session.invite(["limit-over@limit-test.invalid"], rate_limit_waits=0)
            # the owner is logged in once per client (logins are rate-limited per email too)
            assert await client.owner_session() is await client.owner_session()
            fp = await fetch_fingerprint(client)  # an editor-less lane (the default): its Instance AI settings
            assert fp["editor"] == "off" and fp["instance_ai.enabled"] == "true"
    assert limited.value.status == 429
    assert limited.value.retry_after_s is not None and 200 <= limited.value.retry_after_s <= 300


def manual_set_workflow(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "nodes": [
            {"id": "t", "name": "Manual Trigger", "type": "n8n-nodes-base.manualTrigger", "typeVersion": 1,
             "position": [0, 0], "parameters": {}},
            {"id": "s", "name": "Set", "type": "n8n-nodes-base.set", "typeVersion": 3.4, "position": [200, 0],
             "parameters": {"assignments": {"assignments": [
                 {"id": "a", "name": "greeting", "value": "hello", "type": "string"}]}, "options": {}}},
        ],
        "connections": {"Manual Trigger": {"main": [[{"node": "Set", "type": "main", "index": 0}]]}},
        "settings": {"executionOrder": "v1"},
    }


async def test_ready_and_fingerprint(seeded: Seeded) -> None:
    async with N8nClient(seeded.lane.base_url) as client:
        assert await client.ready()
        public = await fetch_fingerprint(client)  # this client never reset the lane: public settings only
        assert "n8n_version" not in public
        owner = await client.login(seeded.owner.email, seeded.owner.password)
        fp = await fetch_fingerprint(client, owner)
    assert fp["n8n_version"] == "2.41.1"
    assert fp["node_version"].startswith("24.")
    assert {"instance-ai", "mcp", "agents"} <= set(fp["active_modules"].split(","))
    assert fp["instance_ai.enabled"] == "true"
    assert fp["instance_ai.modelEnvConfigured"] == "true"
    assert fp["e2e_tests"] == "true"
    blob = json.dumps(fp)
    assert MODEL_KEY not in blob and seeded.owner.password not in blob and owner.cookie not in blob


async def test_dead_lane_is_not_ready_and_raises_transport_errors() -> None:
    port = closed_port()
    async with N8nClient(f"http://127.0.0.1:{port}", retry=RetryPolicy(attempts=2, initial_wait_s=0.01)) as client:
        assert await client.ready() is False
        with pytest.raises(N8nTransportError) as caught:
            await client.settings()
    assert caught.value.status is None
    assert "ConnectError" in str(caught.value)


async def test_wrong_password_is_a_401_http_error(seeded: Seeded) -> None:
    async with N8nClient(seeded.lane.base_url) as client:
        with pytest.raises(N8nHTTPError) as caught:
            await client.login(seeded.owner.email, "not-the-password")
    assert caught.value.status == 401


async def test_member_lifecycle_with_mcp_credentials_and_workflows(seeded: Seeded) -> None:
    nonce = secrets.token_hex(3)
    emails = [f"member-{nonce}-{i}@rest-test.invalid" for i in range(2)]
    async with N8nClient(seeded.lane.base_url) as client:
        owner = await client.login(seeded.owner.email, seeded.owner.password)
        invitations = await owner.invite(emails)
        assert [i.email for i in invitations] == emails
        assert all(i.token and i.token in i.accept_url for i in invitations)
        assert invitations[0].token not in repr(invitations[0])
        again = await owner.invite(emails[:1])  # a pending email: same user, so a resend is safe
        assert again[0].user_id == invitations[0].user_id

        password = "M3mber-" + secrets.token_urlsafe(12)
        member = await client.accept_invitation(invitations[0].token, "Eval", "Member", password)
        me = await member.me()
        assert me["email"] == emails[0] and me["role"] == "global:member"
        assert member.user_id == invitations[0].user_id

        # MCP access is an instance setting: only the owner (or an admin) may switch it on.
        with pytest.raises(N8nHTTPError) as forbidden:
            await member.enable_mcp()
        assert forbidden.value.status == 403
        await owner.enable_mcp()
        key = await member.rotate_mcp_key()
        async with LaneMcpClient(seeded.lane.base_url, key) as mcp:
            names = {t.name for t in await mcp.list_tools()}
            assert {"create_workflow_from_code", "validate_workflow", "search_nodes"} <= names
            found = await mcp.call_tool("search_nodes", {"queries": ["slack"]})
            assert "n8n-nodes-base.slack" in json.dumps(found)
            with pytest.raises(McpToolError):
                await mcp.call_tool("get_workflow_details", {"workflowId": "no-such-workflow"})
        with pytest.raises(McpAuthError) as refused:
            async with LaneMcpClient(seeded.lane.base_url, key[:-6] + "AAAAAA"):
                pass
        assert refused.value.status == 401

        project = await member.personal_project()
        cred = await member.create_credential("rest-test slack", "slackApi", {"accessToken": "xoxb-test"}, project)
        assert cred in {c["id"] for c in await member.list_credentials()}
        assert await member.delete_credential(cred) is True
        assert await member.delete_credential(cred) is False
        assert cred not in {c["id"] for c in await member.list_credentials()}

        wid = await member.create_workflow(manual_set_workflow(f"rest-test {nonce}"))
        assert (await member.get_workflow(wid))["name"] == f"rest-test {nonce}"
        assert wid in {w["id"] for w in await member.list_workflows()}
        assert wid in {w["id"] for w in await owner.list_workflows()}  # the owner sees every project
        assert await member.archive_workflow(wid) is True
        assert await member.archive_workflow(wid) is False  # already archived
        assert await member.delete_workflow(wid) is True
        assert await member.delete_workflow(wid) is False  # gone
        with pytest.raises(N8nHTTPError) as gone:
            await member.get_workflow(wid)
        assert gone.value.not_found

        for invitation in invitations:
            assert await owner.delete_user(invitation.user_id) is True
        assert await owner.delete_user(invitations[0].user_id) is False
        assert frozenset(u["email"] for u in await owner.list_users()) == seeded.start_users
        with pytest.raises(N8nHTTPError) as logged_out:
            await member.me()
        assert logged_out.value.status == 401


async def test_e2e_reset_wipes_members_and_mcp_access(seeded: Seeded) -> None:
    async with N8nClient(seeded.lane.base_url) as client:
        owner = await client.login(seeded.owner.email, seeded.owner.password)
        await owner.invite([f"reset-{secrets.token_hex(3)}@rest-test.invalid"])
        await owner.enable_mcp()
        key = await owner.rotate_mcp_key()
        async with LaneMcpClient(seeded.lane.base_url, key) as mcp:
            assert await mcp.list_tools()
        await client.e2e_reset(seeded.owner, admin=seeded.admin, chat=seeded.chat)
        with pytest.raises(N8nHTTPError) as stale:  # the reset recreated the owner: old cookie is dead
            await owner.me()
        assert stale.value.status == 401
        owner = await client.owner_session()
        assert frozenset(u["email"] for u in await owner.list_users()) == seeded.start_users
        with pytest.raises(McpAuthError):
            async with LaneMcpClient(seeded.lane.base_url, key):
                pass
        await owner.enable_mcp()  # what a build user pool has to redo after every reset


async def test_invite_sends_batches_of_eight(seeded: Seeded) -> None:
    nonce = secrets.token_hex(3)
    emails = [f"batch-{nonce}-{i}@rest-test.invalid" for i in range(11)]
    async with N8nClient(seeded.lane.base_url) as client:
        owner = await client.login(seeded.owner.email, seeded.owner.password)
        invitations = await owner.invite(emails)
        try:
            assert [i.email for i in invitations] == emails
            assert len({i.token for i in invitations}) == 11
            pending = {u["email"] for u in await owner.list_users() if u.get("isPending")}
            assert set(emails) <= pending
        finally:
            for invitation in invitations:
                await owner.delete_user(invitation.user_id)
        assert frozenset(u["email"] for u in await owner.list_users()) == seeded.start_users


async def test_error_messages_carry_no_stack_trace_and_are_redacted(seeded: Seeded) -> None:
    secret_id = "wf-secret-" + secrets.token_hex(6)
    register_secret(secret_id)
    async with N8nClient(seeded.lane.base_url) as client:
        owner = await client.login(seeded.owner.email, seeded.owner.password)
        wid = await owner.create_workflow(manual_set_workflow("rest-test stack"))
        try:
            with pytest.raises(N8nHTTPError) as unarchived:  # n8n answers with a ResponseError + stacktrace
                await owner.call("DELETE", f"/rest/workflows/{wid}")
        finally:
            await owner.delete_workflow(wid)
        with pytest.raises(N8nHTTPError) as echoed:  # n8n echoes the id back in its message
            await owner.get_workflow(secret_id)
    err = unarchived.value
    assert err.status == 400 and "must be archived" in err.message
    assert "stacktrace" not in json.dumps(err.body) and ".ts:" not in str(err) and "node_modules" not in str(err)
    assert secret_id not in str(echoed.value) and MASK in str(echoed.value)


async def test_execute_with_llm_mock_success_failure_and_model_routing(seeded: Seeded) -> None:
    async with N8nClient(seeded.lane.base_url) as client:
        owner = await client.login(seeded.owner.email, seeded.owner.password)
        flow = manual_set_workflow("rest-test mock")
        flow["nodes"].append({"id": "h", "name": "Fetch", "type": "n8n-nodes-base.httpRequest", "typeVersion": 4.2,
                              "position": [400, 0], "parameters": {"url": "https://api.example.com/users", "options": {}}})
        flow["connections"]["Set"] = {"main": [[{"node": "Fetch", "type": "main", "index": 0}]]}
        wid = await owner.create_workflow(flow)
        before = len(seeded.model.message_requests)
        try:
            ok = await owner.execute_with_llm_mock(wid, scenario_hints="one user", timeout_ms=60_000)
            missing = await owner.execute_with_llm_mock("no-such-workflow", timeout_ms=30_000)
            with pytest.raises(ValueError):
                await owner.execute_with_llm_mock(wid, timeout_ms=1_000)
        finally:
            await owner.delete_workflow(wid)
    assert ok.success, ok.errors
    assert ok.node_results["Set"].outputs["main"][0][0]["json"] == {"greeting": "hello"}
    assert ok.node_results["Manual Trigger"].execution_mode == "pinned"
    assert ok.node_results["Manual Trigger"].outputs["main"][0][0]["json"] == TRIGGER_OUTPUT
    fetch = ok.node_results["Fetch"]
    assert fetch.execution_mode == "mocked" and fetch.outputs["main"][0][0]["json"] == MOCK_BODY
    assert fetch.intercepted_requests[0]["url"] == "https://api.example.com/users"
    assert ok.mock_errors == [] and not ok.framework_issue
    assert not missing.success and missing.node_results == {}
    assert missing.errors == ["Workflow no-such-workflow not found or not accessible"]

    sent = seeded.model.message_requests[before:]
    assert [r.path for r in sent] == ["/v1/messages"] * 3  # plan, mock call, mock call after tool result
    assert all(r.body["model"] == "claude-sonnet-4-6" and not r.body.get("stream") for r in sent)
    assert [t["name"] for t in sent[1].body["tools"]] == ["get_endpoint_quirks", "submit_response"]
