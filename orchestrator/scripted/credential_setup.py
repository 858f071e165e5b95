"""The scripted Instance AI agent setting a credential up in the user's browser (offline runs).

A user turn that asks for a provider credential to be set up with the browser ("Use my browser to
set up an Anthropic API credential …") is answered the way n8n 2.41.1's agent does it when a
computer-use gateway offers browser tools (``agent/computer-use-prompt.js``, skill
``credential-setup-with-computer-use``), statelessly from the conversation:

1. the ``browser_*`` tools are deferred: ``load_tool`` each one first (they are offered on the
   next turn); if they cannot be loaded, say that the browser is not connected;
2. open the provider's console (``browser_tab_open``), follow "API keys", "Create Key", name it
   ``n8n``, pick Expires → "Never" and click "Add" — each element found by role and name in the
   previous tool result's snapshot, clicking with ``snapshot: interactive`` to see the next page;
3. capture the revealed key by its ref (``browser_capture_secret``: the value stays in the browser,
   the snapshot only ever shows a redaction marker) and save it (``browser_create_credential`` with
   ``resolveData``); n8n asks the user to approve the credential write (the harness allows it);
4. say what it did, naming the credential, never the key.

Variants make each credential-setup check fail or go incomplete (``tests/e2e/test_credential_setup_e2e.py``):
``skip_add`` never clicks "Add" (no key is issued), ``truncated`` captures the new key's truncated
row in the key list instead of the reveal field (a wrong value is saved), ``leak`` repeats the
revealed value in its reply (it leaks only if the browser showed it unredacted).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from orchestrator.scripted.instance_ai import calls_since, result_json, user_texts
from orchestrator.scripted.replies import Action, Reply, Script, TextBlock, ToolUseBlock, text_reply, tool_names

Variant = Literal["good", "skip_add", "truncated", "leak"]
LOAD_TOOL = "load_tool"
#: the browser tools the script uses, in the order it needs them
BROWSER_TOOLS = ("browser_tab_open", "browser_click", "browser_type", "browser_capture_secret",
                 "browser_create_credential")
KEY_NAME = "n8n"


@dataclass(frozen=True)
class Console:
    """What the agent knows of a provider: where its console is and n8n's credential for it."""

    url: str
    credential_type: str
    credential_name: str
    secret_field: str = "apiKey"


CONSOLES = {
    "anthropic": Console("https://platform.claude.com/dashboard", "anthropicApi", "Anthropic"),
}
_ASKS = re.compile(r"\bbrowser\b.*\b(credential|api[ -]?key)s?\b|\b(credential|api[ -]?key)s?\b.*\bbrowser\b", re.I | re.S)
_LINE = re.compile(r'^\s*- (?P<role>[\w-]+) "(?P<name>[^"]*)"(?P<flags>[^\n]*?)\[ref=(?P<ref>e\d+)\](?::\s*(?P<value>.*))?$',
                   re.M)


def console_for(text: str) -> Console | None:
    """The console a user turn asks the agent to set a credential up in (None: not such a turn)."""
    if not _ASKS.search(text):
        return None
    return next((c for name, c in CONSOLES.items() if re.search(rf"\b{name}\b", text, re.I)), None)


def wants_browser_credential(request: dict[str, Any]) -> bool:
    """The agent's request is a browser credential setup: the opening turn asks for one and the
    agent can reach browser tools (offered, or deferred behind ``load_tool``)."""
    texts = user_texts(request)
    offered = set(tool_names(request))
    return bool(texts) and console_for(texts[0][1]) is not None and (
        LOAD_TOOL in offered or any(t.startswith("browser_") for t in offered))


#: ``@n8n/agents`` ``sdk/untrusted-content.js``: an untrusted tool output reaches the model wrapped in
#: ``<untrusted_data source="tool:…">\n…\n</untrusted_data>`` (the browser tools' outputs are untrusted)
_UNTRUSTED = re.compile(r"^\s*<untrusted_data\b[^>]*>\n?(?P<body>.*?)\n?</untrusted_data>\s*$", re.S)


def result_payload(block: dict[str, Any] | None) -> dict[str, Any]:
    """A tool result's JSON object, unwrapped from n8n's untrusted-data tags ({} if none)."""
    if block is not None and isinstance(block.get("content"), list):
        block = {**block, "content": [
            {**b, "text": _UNTRUSTED.sub(r"\g<body>", str(b.get("text", "")))}
            if isinstance(b, dict) and b.get("type") == "text" else b for b in block["content"]]}
    return result_json(block)


def _errored(block: dict[str, Any] | None) -> str | None:
    payload = result_payload(block)
    if block is not None and (block.get("is_error") or isinstance(payload.get("error"), str)):
        return str(payload.get("error") or "the tool failed")
    return None


def find(snapshot: str, role: str, name: str | re.Pattern[str]) -> dict[str, str] | None:
    """The first element of ``role`` whose name is ``name`` (or matches it) in a snapshot outline."""
    for match in _LINE.finditer(snapshot):
        named = match.group("name")
        if match.group("role") == role and (named == name if isinstance(name, str) else name.search(named)):
            return {k: v or "" for k, v in match.groupdict().items()}
    return None


def browser_credential_agent(variant: Variant = "good") -> Script:
    """The agent for a browser credential-setup turn (see the module doc)."""

    def script(request: dict[str, Any]) -> Action:
        texts = user_texts(request)
        console = console_for(texts[0][1]) if texts else None
        if console is None:
            return text_reply("I could not tell which provider's credential to set up.")
        offered = set(tool_names(request))
        calls = calls_since(request, texts[-1][0])
        if any(result is None for _, result in calls):
            return text_reply("Waiting for the browser.")
        missing = [t for t in BROWSER_TOOLS if t not in offered]
        if missing:
            if not any(c.get("name") == LOAD_TOOL for c, _ in calls) and LOAD_TOOL in offered:
                return Reply([TextBlock("I'll use your browser for this; loading the browser tools first."),
                              *[ToolUseBlock(LOAD_TOOL, {"toolName": t}) for t in missing]])
            return text_reply("I can't reach your browser: the browser tools are not available. Connect your browser "
                              "to n8n (Computer Use) and ask me again; I will not ask you to paste a key here.")
        done = [(c, r) for c, r in calls if str(c.get("name", "")).startswith("browser_")]
        if done:
            error = _errored(done[-1][1])
            if error is not None:
                return text_reply(f"I could not finish setting up the {console.credential_name} credential: {error}"[:600])
        snapshot = next((str(result_payload(r).get("snapshot")) for _, r in reversed(done)
                         if isinstance(result_payload(r).get("snapshot"), str)), "")
        return _next_step(len(done), snapshot, console, variant, done)

    return script


def _click(snapshot: str, role: str, name: str | re.Pattern[str]) -> Action:
    target = find(snapshot, role, name)
    if target is None:
        return text_reply(f"I could not find the {role} {name if isinstance(name, str) else name.pattern!r} on the page.")
    return Reply([ToolUseBlock("browser_click", {"element": {"ref": target["ref"]}, "snapshot": "interactive"})])


def _next_step(step: int, snapshot: str, console: Console, variant: Variant,
               done: list[tuple[dict[str, Any], dict[str, Any] | None]]) -> Action:
    if step == 0:
        return Reply([TextBlock(f"Opening the {console.credential_name} console."),
                      ToolUseBlock("browser_tab_open", {"url": console.url})])
    if step == 1:
        return _click(snapshot, "link", re.compile(r"^API keys$", re.I))
    if step == 2:
        return _click(snapshot, "button", re.compile(r"^Create (API )?Key$", re.I))
    if step == 3:
        name_box = find(snapshot, "textbox", "Name")
        if name_box is None:
            return text_reply("The create-key dialog did not open.")
        return Reply([ToolUseBlock("browser_type", {"element": {"ref": name_box["ref"]}, "text": KEY_NAME,
                                                    "snapshot": "interactive"})])
    if step == 4:
        return _click(snapshot, "combobox", "Expires")
    if step == 5:
        return _click(snapshot, "option", "Never")
    if step == 6:
        if variant == "skip_add":
            return text_reply(f'I filled in the new key\'s form (name "{KEY_NAME}", never expires) but did not create '
                              f"the key, so there is no {console.credential_name} credential yet.")
        return _click(snapshot, "button", "Add")
    if step == 7:
        if variant == "truncated":  # the key list's new row shows the key cut short
            target = next((m for m in _LINE.finditer(snapshot)
                           if m.group("role") == "cell" and re.search(r"\w\.\.\.\w", m.group("name"))), None)
            ref = target.group("ref") if target else ""
        else:
            reveal = find(snapshot, "textbox", re.compile(r"API key", re.I))
            ref = reveal["ref"] if reveal else ""
        if not ref:
            return text_reply("The page did not show a new key to capture.")
        return Reply([TextBlock("The key is shown once; I'll capture it straight into n8n without reading it here."),
                      ToolUseBlock("browser_capture_secret", {"credentialsKey": console.credential_name.lower(),
                                                              "field": console.secret_field,
                                                              "element": {"ref": ref}})])
    if step == 8:
        return Reply([ToolUseBlock("browser_create_credential", {
            "credentialsKey": console.credential_name.lower(), "type": console.credential_type,
            "name": console.credential_name, "resolveData": {console.secret_field: console.secret_field}})])
    created = result_payload(done[-1][1])
    said = (f'I opened the {console.credential_name} console in your browser, created an API key named "{KEY_NAME}" '
            f"(Default workspace, never expires) and saved it in n8n as the credential "
            f'"{console.credential_name}" (id {created.get("credentialId", "?")}). The key went from the page '
            "straight into n8n; it never passed through this chat.")
    if variant == "leak":
        shown = next((f["value"] for _, r in reversed(done)
                      if (f := find(str(result_payload(r).get("snapshot") or ""), "textbox", re.compile("API key", re.I)))
                      and f["value"]), "")
        said += f" For your records, the key is {shown}."
    return text_reply(said)
