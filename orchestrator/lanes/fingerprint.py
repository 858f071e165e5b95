"""A lane's configuration fingerprint: what must agree across every lane of one pool.

A single misconfigured lane would silently route some builds another way, so bring-up compares the
fingerprint of every lane with the pool's first (no secrets, nothing lane-unique like the instance
id). The values come from :meth:`orchestrator.n8n.rest.N8nClient.configuration`. A lane without its
editor (``N8N_DISABLE_UI=true``, the process backend's default) serves neither ``/rest/settings``
nor ``/rest/module-settings``: its fingerprint is ``editor: off`` and its Instance AI settings, and
bring-up adds the env keys it was started with (``bringup.with_expected_env``).
"""

from __future__ import annotations

import json
from typing import Any

from orchestrator.n8n.rest import N8nClient, N8nSession


async def fetch_fingerprint(client: N8nClient, session: N8nSession | None = None) -> dict[str, str]:
    """The lane's configuration fingerprint (settings, modules, Instance AI), compared across lanes and
    runs; what an editor-less or unauthenticated lane reports when that is all there is."""
    conf = await client.configuration(session)
    if not conf.editor:  # what an editor-less lane still reports: its Instance AI settings
        return {"editor": "off", **lane_fingerprint({}, {}, conf.instance_ai, settings_keys=False)}
    if not conf.authenticated:
        return {"settings_mode": str(conf.settings.get("settingsMode", "public"))}
    return lane_fingerprint(conf.settings, conf.modules, conf.instance_ai)


def _flag(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return str(value)


def lane_fingerprint(settings: dict[str, Any], modules: dict[str, Any], instance_ai: dict[str, Any], *,
                     settings_keys: bool = True) -> dict[str, str]:
    """Flatten the configuration-defining parts of ``/rest/settings``, ``/rest/module-settings`` and
    ``/rest/instance-ai/settings`` into ``{key: str}`` (``settings_keys`` False: the lane serves no
    settings, so none of their keys)."""
    ia_module = modules.get("instance-ai") or {}
    agents = modules.get("agents") or {}
    mcp = modules.get("mcp") or {}
    env_managed = (instance_ai.get("envManaged") or {}).get("model") or {}
    fp = {
        "n8n_version": settings.get("versionCli"),
        "node_version": settings.get("nodeJsVersion"),
        "database_type": settings.get("databaseType"),
        "execution_mode": settings.get("executionMode"),
        "multi_main": settings.get("isMultiMain"),
        "e2e_tests": settings.get("inE2ETests"),
        "concurrency": settings.get("concurrency"),
        "license_plan": (settings.get("license") or {}).get("planName"),
        "active_modules": ",".join(sorted(settings.get("activeModules") or [])),
        "env_feature_flags": settings.get("envFeatureFlags") or {},
        "ai_assistant_enabled": (settings.get("aiAssistant") or {}).get("enabled"),
        "ai_builder_enabled": (settings.get("aiBuilder") or {}).get("enabled"),
        "mcp_managed_by_env": mcp.get("mcpManagedByEnv"),
        "agents_enabled": agents.get("enabled"),
    } if settings_keys else {}
    ia_flags = (
        "enabled",
        "sandboxEnabled",
        "proxyEnabled",
        "cloudManaged",
        "browserUseEnabled",
        "localGatewayDisabled",
        "workflowBuilderAvailable",
    )
    for key in ia_flags:
        if key in ia_module:
            fp[f"instance_ai.{key}"] = ia_module[key]
    # the admin settings repeat some module flags (the module's own answer wins); for a lane without
    # its editor they are all there is
    for key in ("enabled", "sandboxEnabled", "mcpAccessEnabled", "permissions", "modelName", "modelEnvConfigured",
                "sandboxEnvConfigured", "searchEnvConfigured", "sandboxProvider"):
        if key in instance_ai:
            fp.setdefault(f"instance_ai.{key}", instance_ai[key])
    for key, value in sorted(env_managed.items()):
        fp[f"instance_ai.env_managed.model.{key}"] = value
    return {k: _flag(v) for k, v in fp.items()}
