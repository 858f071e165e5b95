"""Non-workflow artifacts of a build (Agents, config-evals): discovered, fetched, rendered for the judge.

Following the reference README ("Artifact types (workflow / agent / config-eval)") and n8n's
handlers (``harness/artifacts/agent-handler.ts``, ``config-eval-handler.ts``, ``artifact-context.ts``,
``render-agent.ts``, ``render-config-eval.ts``):

- **discovery** reads the build's event stream: an Agent is the ``targetResource {type: "agent", id}``
  of an ``agent-spawned`` event (the ``build-agent`` result carries no id); a config-eval is a
  successful ``eval-config`` ``create`` call (its result holds ``config``), whose ref is the
  owning workflow id from the call's args (config-evals are listed per workflow);
- **fetch**: an Agent's JSON config (``GET /rest/projects/:p/agents/v2/:id/config``) and its skills
  (``…/:id/skills``), credential-shaped values masked; a workflow's evaluation configs
  (``GET /rest/workflows/:id/evaluation-configs``) and, for the first one whose dataset is a data
  table, that table's columns and the first page of its rows (the server's default page: a sample);
- **render**: one section per artifact type, ``## Agent`` and ``## Config-eval``, always present:
  "(no agent produced)" / "(no config-eval produced)" when the build produced none, and
  "(<type> produced but could not be rendered: <why>)" when discovery found one that could not be
  fetched (so the judge does not read it as absent). The configs are rendered without their
  ``workflowId`` (the owning workflow is context, not the graded content).

Authors grade these sections with ordinary outcome expectations; there is no separate judge.
"""

from __future__ import annotations

import json
from typing import Any

from orchestrator.handoff import ArtifactRef, ArtifactType
from orchestrator.n8n.errors import N8nError
from orchestrator.n8n.rest import N8nSession
from orchestrator.redact import redact
from orchestrator.transcript import scrub

#: the section order and titles of the judge context
SECTIONS: tuple[tuple[ArtifactType, str], ...] = (("agent", "Agent"), ("config-eval", "Config-eval"))
#: cut of one rendered artifact (a long skill reference must not crowd out the expectations)
MAX_RENDERED_CHARS = 30_000


def sanitize(value: Any) -> Any:
    """Credential-shaped values masked and registered secrets redacted (the judge sees no secret)."""
    return scrub(value, limit=20_000)


# ------------------------------------------------------------------------------------------------
# fetch


async def fetch_agent(session: N8nSession, ref: ArtifactRef, project_id: str) -> dict[str, Any]:
    """The Agent ``ref`` names, for the judge: its JSON config and its skills by id, credential-shaped
    values masked. ``ref``'s own project wins over ``project_id``; HTTP errors propagate."""
    project = ref.project_id or project_id
    base = f"/rest/projects/{project}/agents/v2/{ref.id}"
    config = await session.get(f"{base}/config")
    skills = await session.get(f"{base}/skills")
    agent: dict[str, Any] = sanitize({"agentId": ref.id, "config": config if isinstance(config, dict) else {},
                                      "skills": _skills_by_id(skills)})
    return agent


def _skills_by_id(skills: Any) -> dict[str, Any]:
    if isinstance(skills, dict):
        return {str(k): v for k, v in skills.items() if isinstance(v, dict)}
    if isinstance(skills, list):
        return {str(s.get("id") or i): s for i, s in enumerate(skills) if isinstance(s, dict)}
    return {}


async def fetch_config_eval(session: N8nSession, ref: ArtifactRef, project_id: str) -> dict[str, Any]:
    """The config-eval on workflow ``ref``: its evaluation configs and, for the first one fed by a data
    table, that table's columns and first page of rows; values masked. HTTP errors propagate."""
    configs = await session.get(f"/rest/workflows/{ref.id}/evaluation-configs")
    configs = [c for c in configs if isinstance(c, dict)] if isinstance(configs, list) else []
    table = next((c for c in configs if c.get("datasetSource") == "data_table"), None)
    data_table = None
    if table is not None:
        table_id = (table.get("datasetRef") or {}).get("dataTableId")
        base = f"/rest/projects/{project_id}/data-tables/{table_id}"
        data_table = {"columns": await session.get(f"{base}/columns"), "rows": await session.get(f"{base}/rows")}
    evaluation: dict[str, Any] = sanitize({"configs": configs, "dataTable": data_table})
    return evaluation


# ------------------------------------------------------------------------------------------------
# render


def _json_block(value: Any) -> str:
    return "```json\n" + json.dumps(value, indent=2, default=str) + "\n```"


def render_agent(artifact: dict[str, Any]) -> str:
    """The Agent's sanitized config and every skill it was given, in full."""
    parts = ["### Agent config", _json_block(artifact.get("config") or {}), "### Agent skills"]
    skills = artifact.get("skills") or {}
    if not skills:
        parts.append("(no skills authored)")
    for skill_id, skill in skills.items():
        parts.append(f"#### {skill.get('name') or skill_id} (`{skill_id}`)")
        if skill.get("description"):
            parts.append(f"Description: {skill['description']}")
        tools = skill.get("allowedTools") or []
        if tools:
            parts.append("Allowed tools: " + ", ".join(str(t) for t in tools))
        parts.append("Instructions:\n" + str(skill.get("instructions") or "(none)"))
        for reference in skill.get("references") or []:
            if isinstance(reference, dict):
                parts.append(f"Reference `{reference.get('path')}`:\n```markdown\n{reference.get('content', '')}\n```")
    return "\n\n".join(parts)


def render_config_eval(artifact: dict[str, Any]) -> str:
    """The evaluation configs (without the owning workflow id) and a sample of their data table."""
    configs = [{k: v for k, v in c.items() if k != "workflowId"} for c in artifact.get("configs") or []]
    parts = ["### Evaluation configs", _json_block(configs), "### Dataset (data table)"]
    table = artifact.get("dataTable")
    if not table:
        parts.append("(no data-table dataset: the evaluation configs use another dataset source)")
    else:
        parts += ["Columns:", _json_block(table.get("columns")), "Sample rows:", _json_block(table.get("rows"))]
    return "\n\n".join(parts)


def _cut(text: str) -> str:
    return text if len(text) <= MAX_RENDERED_CHARS else text[:MAX_RENDERED_CHARS] + "\n… (artifact cut) …"


async def artifact_context(refs: list[ArtifactRef], session: N8nSession, project_id: str) -> str:
    """The Agent and Config-eval sections of the judge context (module doc), always both."""
    sections = []
    for kind, title in SECTIONS:
        found = [r for r in refs if r.type == kind]
        if not found:
            sections.append(f"## {title}\n\n(no {kind} produced)")
            continue
        rendered = []
        for ref in found:
            try:
                if kind == "agent":
                    rendered.append(render_agent(await fetch_agent(session, ref, project_id)))
                else:
                    rendered.append(render_config_eval(await fetch_config_eval(session, ref, project_id)))
            except N8nError as exc:
                rendered.append(f"({kind} produced but could not be rendered: {redact(str(exc))[:300]})")
        sections.append(f"## {title}\n\n" + "\n\n".join(_cut(r) for r in rendered))
    return "\n\n".join(sections)
