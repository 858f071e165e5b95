"""Declared credentials (issue 16, item 5): naming, description as metadata, ``valid: false``, and
what a real n8n 2.41.1 lane stores and pins for them (the same lane also shows that 2.41.1 has no
observational-memory route for ``requiresMemoryCompaction``)."""

from __future__ import annotations

import secrets
import uuid
from pathlib import Path
from typing import Any

import pytest
from support.lanes import StartedLane

from orchestrator.builders.credentials import (
    INVALID_PLACEHOLDER,
    PLACEHOLDER,
    CredentialTypes,
    UnknownCredentialType,
    bypass_test_ids,
    needs_lane_types,
    plan_credentials,
)
from orchestrator.builders.instance_ai.compaction import NOT_CHECKABLE, CompactionCheck
from orchestrator.builders.users import BuildUserPool
from orchestrator.cases import CredentialSpec
from orchestrator.lanes.model import Lane
from orchestrator.ledger import Ledger
from orchestrator.n8n.errors import N8nError
from orchestrator.n8n.instance_ai import InstanceAiChat
from orchestrator.n8n.owner import OwnerCredentials
from orchestrator.n8n.rest import N8nClient
from orchestrator.redact import MASK, redact


def spec(**kw) -> CredentialSpec:
    return CredentialSpec.model_validate(kw)


def test_names_descriptions_and_validity_are_planned() -> None:
    plan = plan_credentials([
        spec(type="slackApi"),
        spec(type="slackApi", description="  The team workspace  "),
        spec(type="slackApi", name="Ops", valid=False),
        spec(type="notionApi", description="   "),
    ], env={})
    assert [p.name for p in plan] == ["[eval] Slack", "[eval] Slack #2", "Ops", "[eval] Notion"]
    assert [p.description for p in plan] == [None, "The team workspace", None, None]  # trimmed; blank → None
    assert [p.valid for p in plan] == [True, True, False, True]
    assert plan[0].data == {"accessToken": PLACEHOLDER}
    assert plan[2].data == {"accessToken": INVALID_PLACEHOLDER}
    # the description is metadata next to the secret data, never inside it
    body = plan[1].request_body("proj-1")
    assert body == {"name": "[eval] Slack #2", "type": "slackApi", "data": {"accessToken": PLACEHOLDER},
                    "description": "The team workspace", "projectId": "proj-1"}
    assert "description" not in plan[0].request_body()
    assert bypass_test_ids(plan, ["a", "b", "c", "d"]) == ["a", "b", "d"]


def test_live_token_is_a_secret_and_never_used_for_an_invalid_credential() -> None:
    live = "xoxb-live-" + secrets.token_hex(8)
    env = {"EVAL_SLACK_ACCESS_TOKEN": live}
    valid, invalid = plan_credentials([spec(type="slackApi"), spec(type="slackApi", valid=False)], env=env)
    assert valid.data == {"accessToken": live}
    assert redact(f"sent {live}") == f"sent {MASK}"
    assert live not in repr(valid)  # the secret data stays out of reprs (logs)
    assert invalid.data == {"accessToken": INVALID_PLACEHOLDER}


def test_description_longer_than_n8n_allows_is_refused_at_load() -> None:
    with pytest.raises(ValueError, match="512"):
        spec(type="slackApi", description="x" * 513)


@pytest.mark.n8n
async def test_declared_credentials_and_the_compaction_probe_on_a_real_lane(shared_plain_lane: StartedLane,
                                                                           tmp_path: Path) -> None:
    owner = OwnerCredentials("owner@plan-test.invalid", "Own3r-" + secrets.token_urlsafe(12))
    others = {
        "admin": OwnerCredentials("admin@plan-test.invalid", "Adm1n-" + secrets.token_urlsafe(12)),
        "chat": OwnerCredentials("chat@plan-test.invalid", "Ch4t-" + secrets.token_urlsafe(12)),
    }
    declared = [spec(type="slackApi", description="Team workspace, posts to #ops"),
                spec(type="slackApi", valid=False), spec(type="githubApi", name="Work GitHub")]
    started = shared_plain_lane  # reset below: the lane is the session's
    async with N8nClient(started.base_url) as client:
        await client.e2e_reset(owner, admin=others["admin"], chat=others["chat"])
        admin = await client.login(owner.email, owner.password)
        lane = Lane("plan-0", 0, started.base_url, "process", "plan-test")
        pool = BuildUserPool(lane, admin, client, Ledger(tmp_path))
        user = await pool.acquire(declared, mcp_key=False)
        try:
            listed = {c["id"]: c for c in await user.session.list_credentials()}
            assert set(listed) == set(user.credential_ids)
            rows = [listed[cid] for cid in user.credential_ids]
            assert [(r["type"], r["name"]) for r in rows] == [
                ("slackApi", "[eval] Slack"), ("slackApi", "[eval] Slack #2"), ("githubApi", "Work GitHub")]
            assert [r.get("description") for r in rows] == ["Team workspace, posts to #ops", None, None]
            stored = await user.session.get(f"/rest/credentials/{rows[0]['id']}", params={"includeData": "true"})
            assert "description" not in stored["data"] and stored["description"] == "Team workspace, posts to #ops"
            # the valid: false one is pinned but not bypassed; 2.41.1 accepts the field
            assert user.credential_test_bypass == [user.credential_ids[0], user.credential_ids[2]]
            chat = InstanceAiChat(admin)
            thread_id = str(uuid.uuid4())
            await chat.create_thread(user.project_id, thread_id)
            await chat.pin_credentials(thread_id, user.credential_ids, user.credential_test_bypass)
            # requiresMemoryCompaction on 2.41.1: no memory route, so no override and no premise
            check = CompactionCheck()
            await check.prepare(chat, thread_id)
            assert check.supported is False and chat.request_options == {}
            assert await check.check(chat, thread_id) == (NOT_CHECKABLE, None)
            await chat.delete_thread(thread_id)
        finally:
            assert await pool.release(user) == []
        assert [c for c in await admin.list_credentials() if c["id"] in set(user.credential_ids)] == []


@pytest.mark.n8n
async def test_every_credential_type_the_lane_defines_is_created_from_its_derived_data(
        shared_plain_lane: StartedLane) -> None:
    """Our choice beyond n8n's seeder templates (``credentials/seeder.ts``): a case may declare any
    type the pinned n8n defines. Every one of them — the MCP registry's seeded types included
    (``POST /rest/mcp-registry/test/seed``, as n8n's harness seeds each lane) — is accepted by a
    real lane from the placeholder data derived from its definition (an OAuth2 type's URL fields
    get a valid placeholder URL; a hidden field keeps its default, e.g. the MCP server URL)."""
    owner = OwnerCredentials("owner@types-test.invalid", "Own3r-" + secrets.token_urlsafe(12))
    others = {"admin": OwnerCredentials("admin@types-test.invalid", "Adm1n-" + secrets.token_urlsafe(12)),
              "chat": OwnerCredentials("chat@types-test.invalid", "Ch4t-" + secrets.token_urlsafe(12))}
    async with N8nClient(shared_plain_lane.base_url) as client:
        await client.e2e_reset(owner, admin=others["admin"], chat=others["chat"])
        session = await client.login(owner.email, owner.password)
        assert await session.seed_mcp_registry() == 2
        definitions = (await session.call("GET", "/types/credentials.json")).json()
        types = CredentialTypes(definitions)
        names = sorted(str(d["name"]) for d in definitions)
        assert {"notionMcpOAuth2Api", "linearMcpOAuth2Api"} <= set(names)
        refused, created = [], []
        for name in names:
            try:
                created.append(await session.create_credential(f"types-test {name}", name,
                                                               types.placeholder_data(name, PLACEHOLDER)))
            except N8nError as exc:
                refused.append(f"{name}: {exc}")
        for cid in created:
            await session.delete_credential(cid)
        notion = types.placeholder_data("notionMcpOAuth2Api", PLACEHOLDER)
        await session.aclose()
    assert refused == []
    assert notion["serverUrl"] == "https://mcp.notion.com/mcp" and "authUrl" not in notion


# ----------------------------------------------------------------- types the lane defines

LANE_TYPES: list[dict[str, Any]] = [
    {"name": "oAuth2Api", "properties": [{"name": "clientId", "type": "string", "required": True},
                                         {"name": "grantType", "type": "hidden", "default": "authorizationCode"}]},
    {"name": "googleOAuth2Api", "extends": ["oAuth2Api"],
     "properties": [{"name": "scope", "type": "hidden", "default": "x"}]},
    {"name": "gmailOAuth2", "extends": ["googleOAuth2Api"], "properties": []},
    {"name": "anthropicApi", "properties": [
        {"name": "apiKey", "type": "string", "typeOptions": {"password": True}, "required": True, "default": ""},
        {"name": "organizationId", "type": "string", "default": ""},
        {"name": "url", "type": "string", "default": "https://api.anthropic.com"},
        {"name": "header", "type": "boolean", "default": False},
    ]},
]


def test_a_type_without_a_template_takes_its_fields_from_the_lanes_definition() -> None:
    """n8n's seeder (``evaluations/credentials/seeder.ts``) keeps one template per type; here the
    data comes from the lane's ``GET /types/credentials.json``: required/password strings get the
    placeholder, other fields keep their defaults, an OAuth2 type gets token data."""
    types = CredentialTypes(LANE_TYPES)
    [anthropic, gmail] = plan_credentials([spec(type="anthropicApi", name="My Anthropic"), spec(type="gmailOAuth2Api")],
                                       types=types)
    assert anthropic.type == "anthropicApi" and anthropic.name == "My Anthropic"
    assert anthropic.data == {"apiKey": PLACEHOLDER, "url": "https://api.anthropic.com", "header": False}
    assert gmail.type == "gmailOAuth2" and gmail.name == "[eval] gmailOAuth2"  # the seeder's spelling resolves
    assert gmail.data["clientId"] == "eval-client-id" and "oauthTokenData" in gmail.data


def test_blank_and_invalid_credentials_are_not_connected() -> None:
    """README (reference): each account passes its connection test unless it is blank or valid: false."""
    types = CredentialTypes(LANE_TYPES)
    blank, invalid, blank_templated = plan_credentials(
        [spec(type="anthropicApi", blank=True), spec(type="anthropicApi", valid=False), spec(type="httpHeaderAuth", blank=True)],
        types=types)
    assert blank.data == {"apiKey": ""} and not blank.connected  # required/password fields only, left empty
    assert invalid.data["apiKey"] == INVALID_PLACEHOLDER and not invalid.connected
    assert blank_templated.data == {"name": "Authorization", "value": ""}
    assert bypass_test_ids([blank, invalid, blank_templated], ["a", "b", "c"]) == []


def test_a_type_the_lane_does_not_define_is_named() -> None:
    with pytest.raises(UnknownCredentialType, match="'airtableTokenApi'"):
        plan_credentials([spec(type="airtableTokenApi")], types=CredentialTypes(LANE_TYPES))
    assert needs_lane_types([spec(type="anthropicApi")]) and not needs_lane_types([spec(type="slackApi")])
