"""Credential templates: naming, live-token substitution, and acceptance by a real n8n 2.41.1."""

from __future__ import annotations

import secrets
from typing import Any

import pytest
from support.lanes import StartedLane

from orchestrator.builders.credentials import (
    PLACEHOLDER,
    SUPPORTED_TYPES,
    TEMPLATES,
    UnknownCredentialType,
    credential_bodies,
    credential_body,
)
from orchestrator.errors import UserError
from orchestrator.n8n.owner import OwnerCredentials
from orchestrator.n8n.rest import N8nClient
from orchestrator.redact import MASK, known_secrets, redact

CLOSED_SET = {
    "slackApi",
    "notionApi",
    "githubApi",
    "gmailOAuth2",
    "microsoftTeamsOAuth2Api",
    "whatsAppTriggerApi",
    "httpHeaderAuth",
    "httpBasicAuth",
    "openAiApi",  # the LLM judge of a config-based evaluation
}


def test_the_closed_set_has_a_template_each() -> None:
    assert SUPPORTED_TYPES == CLOSED_SET


def test_placeholders_unless_the_env_var_is_set() -> None:
    assert credential_body("slackApi", env={}).data == {"accessToken": PLACEHOLDER}
    live = "xoxb-live-" + secrets.token_hex(8)
    body = credential_body("slackApi", env={"EVAL_SLACK_ACCESS_TOKEN": live})
    assert body.data == {"accessToken": live}
    assert live in known_secrets() and redact(f"token {live}") == f"token {MASK}"
    gmail = credential_body("gmailOAuth2", env={"EVAL_GMAIL_ACCESS_TOKEN": "ya29.live-" + secrets.token_hex(6)})
    assert gmail.data["oauthTokenData"]["access_token"].startswith("ya29.live-")
    assert credential_body("httpHeaderAuth", env={}).data == {"name": "Authorization", "value": f"Bearer {PLACEHOLDER}"}
    assert credential_body("notionApi", env={"EVAL_NOTION_API_KEY": "  "}).data == {"apiKey": PLACEHOLDER}


def test_names_default_per_type_and_duplicates_get_a_suffix() -> None:
    bodies = credential_bodies(
        [("slackApi", None), ("slackApi", None), ("notionApi", "Team wiki"), ("slackApi", None), ("githubApi", "Team wiki")],
        env={},
    )
    assert [b.name for b in bodies] == ["[eval] Slack", "[eval] Slack #2", "Team wiki", "[eval] Slack #3", "Team wiki #2"]
    assert [b.type for b in bodies] == ["slackApi", "slackApi", "notionApi", "slackApi", "githubApi"]
    ctype, data, name = credential_body("httpBasicAuth")
    assert (ctype, name) == ("httpBasicAuth", "[eval] HTTP Basic") and set(data) == {"user", "password"}


def test_unknown_type_is_a_user_error_naming_the_supported_set() -> None:
    with pytest.raises(UnknownCredentialType) as caught:
        credential_body("gmailOAuth2Api")
    assert isinstance(caught.value, UserError)
    assert "gmailOAuth2Api" in str(caught.value) and "slackApi" in str(caught.value)


def _properties(types: dict[str, dict[str, Any]], name: str) -> dict[str, dict[str, Any]]:
    """Own and inherited (``extends``) properties of a credential type."""
    props: dict[str, dict[str, Any]] = {}
    for parent in types[name].get("extends") or []:
        props.update(_properties(types, parent))
    props.update({p["name"]: p for p in types[name].get("properties", [])})
    return props


@pytest.mark.n8n
async def test_every_template_is_accepted_by_real_n8n(shared_plain_lane: StartedLane) -> None:
    owner = OwnerCredentials("owner@cred-test.invalid", "Own3r-" + secrets.token_urlsafe(12))
    others = {
        "admin": OwnerCredentials("admin@cred-test.invalid", "Adm1n-" + secrets.token_urlsafe(12)),
        "chat": OwnerCredentials("chat@cred-test.invalid", "Ch4t-" + secrets.token_urlsafe(12)),
    }
    lane = shared_plain_lane  # reset below: the lane is the session's
    async with N8nClient(lane.base_url) as client:
        await client.e2e_reset(owner, **others)
        admin = await client.login(owner.email, owner.password)
        [invite] = await admin.invite(["builder@cred-test.invalid"])
        member = await client.accept_invitation(invite.token, "Eval", "Builder", "B1lder-" + secrets.token_urlsafe(9))
        project = await member.personal_project()
        types = {t["name"]: t for t in (await member.call("GET", "/types/credentials.json")).json()}

        bodies = credential_bodies([(t, None) for t in sorted(CLOSED_SET)], env={})
        for body in bodies:
            props = _properties(types, body.type)
            unknown = set(body.data) - set(props) - {"oauthTokenData"}
            assert not unknown, f"{body.type}: fields n8n does not define: {unknown}"
            own_required = {p["name"] for p in types[body.type].get("properties", []) if p.get("required")}
            assert own_required <= set(body.data), f"{body.type}: missing {own_required - set(body.data)}"

            cid = await member.create_credential(body.name, body.type, body.data, project_id=project)
            stored = await member.get(f"/rest/credentials/{cid}", params={"includeData": "true"})
            assert stored["type"] == body.type and stored["name"] == TEMPLATES[body.type].default_name
            assert set(body.data) <= set(stored["data"]), f"{body.type}: n8n dropped {set(body.data) - set(stored['data'])}"

        listed = await member.list_credentials()
        assert {c["type"] for c in listed} == CLOSED_SET
        assert {c["homeProject"]["id"] for c in listed} == {project}
        for c in listed:
            assert await member.delete_credential(c["id"])
        assert await member.list_credentials() == []
        await admin.delete_user(member.user_id)
