"""The provider fixture and the agent's browser of a ``credentialFixture`` build, on loopback without
a lane: the manifest schema, the page listener and its mint, the provider-API stand-in, the
browser's pages, redaction and secret capture, and the scripted agent's reading of them.

Rules from n8n ``packages/@n8n/instance-ai/evaluations/harness/fixture-server.ts`` and its test
``__tests__/fixture-server.test.ts`` (the newer manifest schema: ``urlField``, the ``verify`` union),
``harness/credential-setup-lane.ts`` (the fixture ids), and ``@n8n/mcp-browser`` 0.22.0's
``tools/credential.js`` (capture and create errors) as installed with n8n 2.41.1.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from orchestrator.builders.instance_ai.credential_setup import LeakWatch
from orchestrator.builders.instance_ai.credential_setup.browser import CONFIRMATION_PREFIX, TOOLS, Browser
from orchestrator.builders.instance_ai.credential_setup.fixture_server import FixtureServer, mint_secret
from orchestrator.cases.provider_fixtures import (
    MINT_PATH,
    ProviderFixture,
    ProviderManifest,
    fixture_ids,
    match_route,
    provider_fixtures,
    resolve_fixture,
)
from orchestrator.redact import redact
from orchestrator.scripted.credential_setup import console_for, find, wants_browser_credential

ANTHROPIC = provider_fixtures()["anthropic"]
BASE = {"credentialType": "fooApi", "hosts": ["foo.example"], "secretPrefix": "foo-",
        "routes": {"/keys": "console.html"}, "defaultRoute": "/keys"}


def test_the_shipped_fixtures_load_and_anthropic_is_n8ns() -> None:
    """n8n's anthropic fixture: ``anthropicApi`` on platform.claude.com / console.anthropic.com,
    prefix ``sk-ant-api03-``, ``/settings/keys`` and the default ``/dashboard``, a stand-in on
    ``/v1/models`` reading ``x-api-key`` (the credential's own test request)."""
    assert fixture_ids() == ["anthropic"]
    m = ANTHROPIC.manifest
    assert (m.credential_type, m.hosts, m.secret_prefix, m.url_field) == (
        "anthropicApi", ["platform.claude.com", "console.anthropic.com"], "sk-ant-api03-", "url")
    assert m.default_route == "/dashboard" and set(m.routes) == {"/dashboard", "/settings/keys"}
    assert m.verify is not None and m.verify.path == "/v1/models" and getattr(m.verify, "header", None) == "x-api-key"
    assert resolve_fixture("anthropic") is ANTHROPIC and resolve_fixture(None) is None
    with pytest.raises(ValueError, match='unknown provider fixture "nope": available anthropic'):
        resolve_fixture("nope")


@pytest.mark.parametrize("verify, ok", [
    ({"path": "/models", "header": "Authorization", "scheme": "Bearer"}, True),
    ({"path": "/v1beta/models", "query": "key"}, True),
    ({"path": "/models"}, False),                                   # neither header nor query
    ({"path": "/models", "header": "x", "query": "key"}, False),    # both
    ({"path": "/models", "query": "key", "scheme": "Bearer"}, False),  # scheme on the query arm
    ({"path": "models", "header": "x"}, False),                     # path must start with /
])
def test_the_verify_block_is_a_strict_union(verify: dict[str, Any], ok: bool) -> None:
    body = {**BASE, "verify": verify}
    if ok:
        ProviderManifest.model_validate(body)
    else:
        with pytest.raises(ValidationError):
            ProviderManifest.model_validate(body)


def test_the_manifest_rejects_an_unrouted_default_and_unknown_keys() -> None:
    with pytest.raises(ValidationError, match='defaultRoute "/home" is not one of routes'):
        ProviderManifest.model_validate({**BASE, "defaultRoute": "/home"})
    with pytest.raises(ValidationError):
        ProviderManifest.model_validate({**BASE, "extra": 1})
    assert ProviderManifest.model_validate({**BASE, "urlField": "host"}).url_field == "host"
    assert ProviderManifest.model_validate(BASE).url_field == "url"


def test_routes_match_exactly_first_and_params_never_cross_a_segment() -> None:
    routes = ["/apps", "/apps/:appId/general", "/apps/new/general"]
    assert match_route(routes, "/apps/new/general") == "/apps/new/general"  # exact beats a pattern
    assert match_route(routes, "/apps/A1/general") == "/apps/:appId/general"
    assert match_route(routes, "/apps/A1") is None
    assert match_route(routes, "/apps/A1/x/general") is None
    assert match_route(routes, "/apps?x=1") == "/apps"


def test_a_minted_key_is_the_prefix_and_32_fresh_characters() -> None:
    one, two = mint_secret("sk-ant-api03-"), mint_secret("sk-ant-api03-")
    assert one != two and re.fullmatch(r"sk-ant-api03-[A-Za-z0-9_-]{32}", one)


async def _served(fixture: ProviderFixture = ANTHROPIC) -> FixtureServer:
    return await FixtureServer(fixture).start()


def test_the_stand_in_accepts_exactly_the_minted_key() -> None:
    """fixture-server.ts verify: on the path every request counts; 200 only for the exact key
    (a truncated key is 401); another path is 404 and no attempt."""

    async def go() -> None:
        server = await _served()
        try:
            secret = server.minted_secret
            assert redact(f"key {secret}") == "key ***"  # registered the moment it was minted
            async with httpx.AsyncClient(base_url=str(server.verify_base_url)) as http:
                other = await http.get("/v1/other", headers={"x-api-key": secret})
                assert other.status_code == 404 and server.ledger.verify_attempts == 0
                short = await http.get("/v1/models", headers={"x-api-key": secret[:16] + "..." + secret[-4:]})
                assert short.status_code == 401 and short.json() == {"error": "invalid key"}
                none = await http.get("/v1/models")
                assert none.status_code == 401 and not server.ledger.verified_ok
                good = await http.get("/v1/models", headers={"x-api-key": secret})
                assert good.status_code == 200 and good.json() == {"data": [{"id": "fixture-model"}]}
            assert (server.ledger.verify_attempts, server.ledger.verified_ok) == (3, True)
            assert not server.ledger.secret_was_issued  # nothing was minted for the page
        finally:
            await server.close()

    asyncio.run(go())


@pytest.mark.parametrize("verify, present, accepted", [
    ({"path": "/models", "header": "Authorization", "scheme": "Bearer"}, ("header", "Bearer {key}"), True),
    ({"path": "/models", "header": "Authorization", "scheme": "Bearer"}, ("header", "{key}"), False),  # bare key
    ({"path": "/v1beta/models", "query": "key"}, ("query", "{key}"), True),
    ({"path": "/v1beta/models", "query": "key"}, ("header", "{key}"), False),  # a header cannot satisfy a query
])
def test_the_stand_in_arms(verify: dict[str, Any], present: tuple[str, str], accepted: bool) -> None:
    fixture = ProviderFixture("foo", ProviderManifest.model_validate({**BASE, "verify": verify}), ANTHROPIC.folder)

    async def go() -> None:
        server = await _served(fixture)
        try:
            value = present[1].format(key=server.minted_secret)
            async with httpx.AsyncClient(base_url=str(server.verify_base_url)) as http:
                if present[0] == "header":
                    response = await http.get(verify["path"], headers={verify.get("header", "key"): value})
                else:
                    response = await http.get(verify["path"], params={verify["query"]: value})
            assert (response.status_code == 200) is accepted and server.ledger.verify_attempts == 1
        finally:
            await server.close()

    asyncio.run(go())


def test_pages_are_served_as_any_host_and_only_add_mints() -> None:
    async def go() -> None:
        server = await _served()
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.page_port}") as http:
                keys = await http.get("/settings/keys", headers={"Host": "platform.claude.com"})
                other = await http.get("/anything/else", headers={"Host": "example.org"})
                icon = await http.get("/favicon.ico")
                assert "<title>API keys - Claude Console</title>" in keys.text
                assert "<title>Dashboard - Claude Console</title>" in other.text and icon.status_code == 204
                assert server.minted_secret not in keys.text + other.text
                assert not server.ledger.secret_was_issued
                minted = await http.post(MINT_PATH, json={"name": "n8n"}, headers={"Host": "platform.claude.com"})
                assert minted.json() == {"key": server.minted_secret} and server.ledger.secret_was_issued
            hosts = [(e["host"], e["path"]) for e in server.ledger.events]
            assert hosts[:2] == [("platform.claude.com", "/settings/keys"), ("example.org", "/anything/else")]
            assert server.minted_secret not in json.dumps(server.ledger.events)
        finally:
            await server.close()
        with pytest.raises(httpx.ConnectError):  # closed means closed
            async with httpx.AsyncClient() as http:
                await http.get(f"http://127.0.0.1:{server.page_port}/dashboard")

    asyncio.run(go())


class _Saved:
    def __init__(self) -> None:
        self.credentials: list[tuple[str, str, dict[str, Any], str | None]] = []

    async def __call__(self, name: str, ctype: str, data: dict[str, Any], project: str | None) -> str:
        self.credentials.append((name, ctype, data, project))
        return f"cred-{len(self.credentials)}"


async def _walk_to_the_reveal(browser: Browser, *, add: bool = True) -> str:
    """Drive the console as the scripted agent does; return the last snapshot."""
    opened, _ = await browser.call("browser_tab_open", {"url": "https://platform.claude.com/dashboard"})
    snap = str(opened["snapshot"])
    for role, name in (("link", "API keys"), ("button", "Create Key")):
        target = find(snap, role, name)
        assert target is not None, (role, name, snap)
        done, error = await browser.call("browser_click", {"element": {"ref": target["ref"]}, "snapshot": "interactive"})
        assert not error, done
        snap = str(done["snapshot"])
    name_box = find(snap, "textbox", "Name")
    assert name_box is not None
    await browser.call("browser_type", {"element": {"ref": name_box["ref"]}, "text": "n8n"})
    add_button = find(snap, "button", "Add")
    assert add_button is not None and "[disabled]" in add_button["flags"]  # gated until Expires is picked
    refused, error = await browser.call("browser_click", {"element": {"ref": add_button["ref"]}})
    assert error and "disabled" in str(refused["error"])
    for role, name in (("combobox", "Expires"), ("option", "Never")):
        done, _ = await browser.call("browser_snapshot", {})
        target = find(str(done["snapshot"]), role, name)
        assert target is not None, (role, name)
        await browser.call("browser_click", {"element": {"ref": target["ref"]}})
    done, _ = await browser.call("browser_snapshot", {})
    snap = str(done["snapshot"])
    add_button = find(snap, "button", "Add")
    assert add_button is not None and "[disabled]" not in add_button["flags"]
    if add:
        done, error = await browser.call("browser_click", {"element": {"ref": add_button["ref"]},
                                                           "snapshot": "interactive"})
        assert not error, done
        snap = str(done["snapshot"])
    return snap


def test_the_browser_reveals_a_marker_and_captures_the_key_behind_it() -> None:
    """mcp-browser's contract: the revealed key shows as a redaction marker in every output; capture
    by ref or marker buffers the real value, never returned; create assembles it, after approval."""

    async def go() -> None:
        server, saved = await _served(), _Saved()
        browser = Browser(server.page_port, saved)
        outputs: list[str] = []
        try:
            before = await _walk_to_the_reveal(browser, add=False)
            assert not server.ledger.secret_was_issued and server.minted_secret not in before
            snap = await _walk_to_the_reveal(browser)
            assert server.ledger.secret_was_issued
            reveal = find(snap, "textbox", "API key")
            assert reveal is not None and reveal["value"] == "[REDACTED:api_key:1]", snap
            new_row = next(m for m in re.finditer(r'- cell "(sk-ant-api03-[^"]*)"', snap))
            assert new_row.group(1) == server.minted_secret[:16] + "..." + server.minted_secret[-4:]
            outputs += [snap, json.dumps((await browser.call("browser_content", {}))[0]),
                        json.dumps((await browser.call("browser_snapshot", {"interactive": False}))[0])]
            assert "[REDACTED:api_key:1]" in outputs[-1] and "[ref=" not in outputs[-1]
            marker, error = await browser.call("browser_capture_secret", {
                "credentialsKey": "a", "field": "apiKey", "element": {"redactedKey": "[REDACTED:api_key:1]"}})
            assert not error and marker == {"ok": True, "fieldsCaptured": ["apiKey"]}
            missing, error = await browser.call("browser_capture_secret", {
                "credentialsKey": "a", "field": "apiKey", "element": {"redactedKey": "[REDACTED:api_key:7]"}})
            assert error and missing["error"] == 'The marker "[REDACTED:api_key:7]" was not found.'
            name_box = find(snap, "searchbox", "Search keys")
            assert name_box is not None
            empty, error = await browser.call("browser_capture_secret", {
                "credentialsKey": "a", "field": "x", "element": {"ref": name_box["ref"]}})
            assert error and str(empty["error"]).startswith('The element for "x" holds no value.')
            args = {"credentialsKey": "a", "type": "anthropicApi", "name": "Anthropic",
                    "resolveData": {"apiKey": "apiKey"}}
            ask, error = await browser.call("browser_create_credential", args)
            assert error and str(ask["error"]).startswith(CONFIRMATION_PREFIX) and not saved.credentials
            asked = json.loads(str(ask["error"])[len(CONFIRMATION_PREFIX):])
            assert asked == {"toolGroup": "browser", "resource": "credentials",
                             "description": 'Create credential "Anthropic" (anthropicApi)',
                             "options": ["denyOnce", "allowOnce"]}
            denied, error = await browser.call("browser_create_credential", {**args, "_confirmation": "denyOnce"})
            assert error and not saved.credentials
            made, error = await browser.call("browser_create_credential", {**args, "_confirmation": "allowOnce"})
            assert not error and made == {"ok": True, "credentialId": "cred-1"}
            assert saved.credentials == [("Anthropic", "anthropicApi", {"apiKey": server.minted_secret}, None)]
            again, error = await browser.call("browser_create_credential", {**args, "_confirmation": "allowOnce"})
            assert error and again["error"] == ('No captured fields found for credentialsKey "a". Call '
                                                "browser_capture_secret first.")  # cleared after success
            outputs += [json.dumps(x) for x in (marker, missing, empty, ask, denied, made, again)]
            assert not any(server.minted_secret in o for o in outputs)
        finally:
            await browser.aclose()
            await server.close()

    asyncio.run(go())


def test_a_marker_is_not_a_secret_and_a_leaking_browser_shows_the_key() -> None:
    async def go() -> None:
        server, saved = await _served(), _Saved()
        quiet, loud = Browser(server.page_port, saved), Browser(server.page_port, saved, redact_secrets=False)
        try:
            await _walk_to_the_reveal(quiet)
            assert server.minted_secret not in json.dumps((await quiet.call("browser_content", {}))[0])
            page = quiet.pages[str(quiet.active)]
            reveal = next(n for n in page.root.walk() if n.attrs.get("id") == "new-key")
            reveal.value = "[REDACTED:api_key:1]"  # a page showing a marker, not a key
            refused, error = await quiet.call("browser_capture_secret", {
                "credentialsKey": "a", "field": "apiKey", "element": {"ref": reveal.ref}})
            assert error and str(refused["error"]).startswith('The value read for "apiKey" is a redaction marker')
            snap = await _walk_to_the_reveal(loud)
            leaked = find(snap, "textbox", "API key")
            assert leaked is not None and leaked["value"] == server.minted_secret
        finally:
            await quiet.aclose()
            await loud.aclose()
            await server.close()

    asyncio.run(go())


def test_the_advertised_tools_carry_the_browser_category_and_object_schemas() -> None:
    """n8n's ``McpTool``: an object ``inputSchema`` with ``properties``; ``annotations.category``
    ``browser`` (what puts them in the browser channel)."""
    names = [t["name"] for t in TOOLS]
    assert {"browser_tab_open", "browser_snapshot", "browser_click", "browser_type", "browser_capture_secret",
            "browser_create_credential"} <= set(names) and len(names) == len(set(names))
    for tool in TOOLS:
        assert tool["inputSchema"]["type"] == "object" and isinstance(tool["inputSchema"]["properties"], dict)
        assert tool["annotations"] == {"category": "browser"}


def test_the_leak_watch_sees_the_key_raw_or_json_escaped() -> None:
    watch = LeakWatch("sk-ant-api03-abc")
    watch.feed('{"text": "nothing here", "marker": "[REDACTED:api_key:1]"}')
    assert not watch.seen
    watch.feed(json.dumps({"delta": "the key is sk-ant-api03-abc"}))
    assert watch.seen


def test_the_scripted_agent_takes_only_browser_credential_turns() -> None:
    """The scripted agent (``orchestrator.scripted.credential_setup``) answers a turn asking for a
    credential through the browser, when browser tools are reachable; nothing else."""
    ask = "Use my browser to set up an Anthropic API credential in n8n."

    def request(text: str, tools: list[str]) -> dict[str, Any]:
        return {"messages": [{"role": "user", "content": text}], "tools": [{"name": t} for t in tools]}

    assert console_for(ask) is not None
    assert wants_browser_credential(request(ask, ["build-workflow", "load_tool"]))
    assert not wants_browser_credential(request(ask, ["build-workflow"]))  # no browser reachable
    assert not wants_browser_credential(request("Build a workflow that opens a GitHub issue", ["load_tool"]))
    assert not wants_browser_credential(request("Set up an Anthropic credential in n8n", ["load_tool"]))
