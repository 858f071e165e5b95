"""Workflows as a builder creates them (n8n 2.41 node types and versions), with the workflow-check
outcomes each must get. ``tests/unit/verify/test_workflow_checks.py`` saves them on a real lane and checks the
JSON n8n gives back; the same JSON, captured, lives in ``tests/fixtures/workflows/``."""

from __future__ import annotations

from typing import Any

LC = "@n8n/n8n-nodes-langchain"


def node(name: str, type_: str, version: float, params: dict[str, Any] | None = None, x: int = 0,
         **extra: Any) -> dict[str, Any]:
    return {"parameters": params or {}, "name": name, "type": type_, "typeVersion": version,
            "position": [x, 0], "id": f"id-{name.lower().replace(' ', '-')}", **extra}


def main(*targets: str) -> dict[str, Any]:
    return {"main": [[{"node": t, "type": "main", "index": 0} for t in targets]]}


def ai(kind: str, target: str) -> dict[str, Any]:
    return {kind: [[{"node": target, "type": kind, "index": 0}]]}


CLEAN = {
    "name": "checks: clean",
    "nodes": [
        node("When clicking Execute", "n8n-nodes-base.manualTrigger", 1),
        node("Set answer", "n8n-nodes-base.set", 3.4, {"assignments": {"assignments": [
            {"id": "a1", "name": "answer", "value": 42, "type": "number"}]}, "options": {}}, 200),
        node("Route by answer", "n8n-nodes-base.switch", 3.2, {"rules": {"values": [{"conditions": {
            "options": {"caseSensitive": True, "leftValue": "", "typeValidation": "strict", "version": 2},
            "conditions": [{"leftValue": "={{ $json.answer }}", "rightValue": 42,
                            "operator": {"type": "number", "operation": "equals"}}], "combinator": "and"}}]},
            "options": {"fallbackOutput": "extra"}}, 400),
        node("Format reply", "n8n-nodes-base.set", 3.4, {"assignments": {"assignments": [
            {"id": "b1", "name": "text", "value": "=Answer: {{ $('Set answer').item.json.answer }}",
             "type": "string"}]}, "options": {}}, 600),
    ],
    "connections": {"When clicking Execute": main("Set answer"), "Set answer": main("Route by answer"),
                    "Route by answer": {"main": [[{"node": "Format reply", "type": "main", "index": 0}], []]}},
    "settings": {"executionOrder": "v1"},
}

CLEAN_EXPECTED = {
    "has_nodes": "pass", "has_trigger": "pass", "has_start_node": "pass", "no_disabled_nodes": "pass",
    "all_nodes_connected": "pass", "no_unreachable_nodes": "pass", "error_routes_consistent": "n_a",
    "no_empty_set_nodes": "pass", "expressions_reference_existing_nodes": "pass",
    "valid_field_references": "pass", "valid_node_config": "pass", "no_invalid_from_ai": "n_a",
    "switch_fallback_output_enabled": "pass", "agent_has_dynamic_prompt": "n_a",
    "agent_has_language_model": "n_a", "memory_properly_connected": "n_a", "vector_store_has_embeddings": "n_a",
    "tools_have_parameters": "n_a", "memory_session_key_expression": "n_a", "no_unnecessary_code_nodes": "n_a",
    "no_hardcoded_credentials": "pass", "inbound_trigger_auth_defaults": "n_a",
}

FLAWED = {
    "name": "checks: flawed",
    "nodes": [
        node("Webhook", "n8n-nodes-base.webhook", 2, {"path": "signup", "httpMethod": "POST", "options": {}},
             webhookId="0c6bd1de-2f3f-4d4e-9d0b-2b9f3f1c0a11"),
        node("Keep email", "n8n-nodes-base.set", 3.4, {"assignments": {"assignments": [
            {"id": "c1", "name": "email", "value": "={{ $json.body.email }}", "type": "string"}]}, "options": {}}, 200),
        node("Make payload", "n8n-nodes-base.code", 2, {"jsCode": "return [{ json: { mail: $json.mail, source: 'web' } }];"},
             400),
        node("Empty set", "n8n-nodes-base.set", 3.4, {"assignments": {"assignments": []}, "options": {}}, 500),
        node("Call CRM", "n8n-nodes-base.httpRequest", 4.2, {
            "method": "POST", "url": "https://crm.example.invalid/contacts", "sendHeaders": True,
            "headerParameters": {"parameters": [{"name": "Authorization",
                                                 "value": "Bearer sk-live-abcdefghijklmnopqrstuvwx"}]},
            "sendBody": True, "jsonBody": "={{ $('Lookup contact').item.json }}",
        }, 600, onError="continueErrorOutput"),
        node("Route", "n8n-nodes-base.switch", 3.2, {"rules": {"values": []}, "options": {}}, 800),
        node("Old step", "n8n-nodes-base.noOp", 1, {}, 800, disabled=True),
        node("Forgotten", "n8n-nodes-base.noOp", 1, {}, 1000),
    ],
    "connections": {"Webhook": main("Keep email"), "Keep email": main("Make payload"),
                    "Make payload": main("Empty set"), "Empty set": main("Call CRM"),
                    "Call CRM": main("Route"), "Route": main("Old step")},
    "settings": {"executionOrder": "v1"},
}
FLAWED_PROMPT = "When someone signs up on our site, forward the email to the CRM."

FLAWED_EXPECTED = {
    "has_nodes": "pass", "has_trigger": "pass", "has_start_node": "pass", "no_disabled_nodes": "fail",
    "all_nodes_connected": "fail", "no_unreachable_nodes": "fail", "error_routes_consistent": "fail",
    "no_empty_set_nodes": "fail", "expressions_reference_existing_nodes": "fail",
    "valid_field_references": "fail", "valid_node_config": "pass", "no_invalid_from_ai": "n_a",
    "switch_fallback_output_enabled": "fail", "agent_has_dynamic_prompt": "n_a",
    "agent_has_language_model": "n_a", "memory_properly_connected": "n_a", "vector_store_has_embeddings": "n_a",
    "tools_have_parameters": "n_a", "memory_session_key_expression": "n_a", "no_unnecessary_code_nodes": "fail",
    "no_hardcoded_credentials": "fail", "inbound_trigger_auth_defaults": "pass",
}

AGENT = {
    "name": "checks: agent",
    "nodes": [
        node("When chat message received", f"{LC}.chatTrigger", 1.1, {"options": {}},
             webhookId="6f1d8c1e-8d0f-4c55-9a9e-7a4bb0b6c3d2"),
        node("Support agent", f"{LC}.agent", 2, {"promptType": "define", "text": "Answer the customer politely.",
                                                  "options": {"systemMessage": "You are support."}}, 200),
        node("Claude", f"{LC}.lmChatAnthropic", 1.3, {"model": {"__rl": True, "mode": "list",
                                                                  "value": "claude-sonnet-4-5"}, "options": {}}, 200),
        node("Chat memory", f"{LC}.memoryBufferWindow", 1.3, {"sessionIdType": "customKey", "sessionKey": "support"}, 300),
        node("Order lookup", "n8n-nodes-base.httpRequestTool", 4.2, {
            "toolDescription": "Look up an order",
            "url": "=https://shop.example.invalid/orders/{{ $fromAI('orderId', 'the order id', 'string') }}",
            "options": {}}, 400),
        node("Store", f"{LC}.vectorStoreInMemory", 1.1, {"memoryKey": "kb"}, 500),
        node("Stamp", "n8n-nodes-base.set", 3.4, {"assignments": {"assignments": [
            {"id": "d1", "name": "asked", "value": "={{ $fromAI('q') }}", "type": "string"}]}, "options": {}}, 600),
    ],
    "connections": {"When chat message received": main("Support agent"),
                    "Claude": ai("ai_languageModel", "Support agent"),
                    "Chat memory": ai("ai_memory", "Support agent"),
                    "Order lookup": ai("ai_tool", "Support agent"),
                    "Support agent": main("Stamp"),
                    "Store": ai("ai_tool", "Support agent")},
    "settings": {"executionOrder": "v1"},
}

AGENT_EXPECTED = {
    "agent_has_dynamic_prompt": "fail", "agent_has_language_model": "pass", "memory_properly_connected": "pass",
    "vector_store_has_embeddings": "fail", "tools_have_parameters": "pass", "memory_session_key_expression": "fail",
    "no_invalid_from_ai": "fail", "inbound_trigger_auth_defaults": "pass", "no_unreachable_nodes": "pass",
    "all_nodes_connected": "pass", "has_start_node": "pass",
}

SAMPLES = {
    "clean": (CLEAN, "Build a manual workflow that sets answer = 42 and formats a reply.", CLEAN_EXPECTED),
    "flawed": (FLAWED, FLAWED_PROMPT, FLAWED_EXPECTED),
    "agent": (AGENT, "A support chatbot that can look up orders.", AGENT_EXPECTED),
}
