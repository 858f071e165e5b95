"""The 28 workflow checks of the reference rubric, run once per built workflow.

Each check answers yes / no / N/A ("nothing in this workflow to check") with a one-line reason,
and belongs to one of 8 dimensions (the reference's WHAT-side rubric; the 9th, execution outcome,
is the scenario verifier's):

=====================  ==  ============================================================
structure               4  has_nodes, has_trigger, has_start_node, no_disabled_nodes
connection_topology     4  all_nodes_connected, no_unreachable_nodes, error_routes_consistent,
                           handles_multiple_items (LLM)
parameter_correctness   8  no_empty_set_nodes, expressions_reference_existing_nodes,
                           valid_field_references, valid_node_config, no_invalid_from_ai,
                           switch_fallback_output_enabled, valid_data_flow (LLM),
                           correct_node_operations (LLM)
intent_match            1  fulfills_user_request (LLM)
communication           1  response_describes_changes_accurately (LLM)
ai_nodes                6  agent_has_dynamic_prompt, agent_has_language_model,
                           memory_properly_connected, vector_store_has_embeddings,
                           tools_have_parameters, memory_session_key_expression
nodes_craftsmanship     2  descriptive_node_names (LLM), no_unnecessary_code_nodes
security                2  no_hardcoded_credentials, inbound_trigger_auth_defaults
=====================  ==  ============================================================

Deterministic checks are pure functions of the workflow JSON (plus the user's prompt for the ones
that depend on what was asked). The six LLM checks go through the judge model in one call; with no
judge key they are N/A. Checks never change a scenario's verdict: they are reported beside it
(``eval-results.json`` ``summary.workflowChecks``, the PR comment, the report, and LangSmith
feedback keys ``evals.workflows.<dimension>.<check>`` — N/A omitted, see :func:`feedback`).
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from orchestrator.domain import Verdict
from orchestrator.results.model import StructuralCheck

if TYPE_CHECKING:
    from orchestrator.verify.judge import Judge

Outcome = tuple[bool | None, str]  # (True pass / False fail / None N/A, reason)
Workflow = dict[str, Any]


@dataclass(frozen=True)
class CheckContext:
    """What a check may know besides the workflow."""

    prompt: str = ""
    #: The builder's narration of what it did (chat text / claude's final result), when captured.
    narration: str | None = None
    #: Per-case annotations (e.g. ``code_necessary: true``).
    annotations: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckSpec:
    name: str
    dimension: str
    kind: Literal["deterministic", "llm"]
    description: str
    run: Callable[[Workflow, CheckContext], Outcome] | None = None  # deterministic checks only


# --------------------------------------------------------------------------- workflow helpers

STICKY = "n8n-nodes-base.stickyNote"
SET_TYPE = "n8n-nodes-base.set"
CODE_TYPES = ("n8n-nodes-base.code", "n8n-nodes-base.function", "n8n-nodes-base.functionItem")
SWITCH_TYPE = "n8n-nodes-base.switch"
AGENT_TYPES = ("@n8n/n8n-nodes-langchain.agent", "@n8n/n8n-nodes-langchain.agentTool")
INBOUND_TRIGGERS = ("n8n-nodes-base.webhook", "n8n-nodes-base.formTrigger", "@n8n/n8n-nodes-langchain.chatTrigger")
_TRIGGER_TYPES = ("n8n-nodes-base.webhook", "n8n-nodes-base.start", "n8n-nodes-base.cron", "n8n-nodes-base.interval")


def nodes(workflow: Workflow) -> list[dict[str, Any]]:
    """The workflow's nodes, sticky notes left out."""
    return [n for n in workflow.get("nodes") or [] if isinstance(n, dict) and n.get("type") != STICKY]


def node_type(node: dict[str, Any]) -> str:
    return str(node.get("type") or "")


def short_type(node: dict[str, Any]) -> str:
    return node_type(node).rsplit(".", 1)[-1]


def is_trigger(node: dict[str, Any]) -> bool:
    """Whether ``node`` starts a flow: a ``*Trigger`` type or one of the known trigger types."""
    t = node_type(node)
    return t.endswith(("Trigger", "trigger")) or t in _TRIGGER_TYPES


def is_tool(node: dict[str, Any]) -> bool:
    """Whether ``node`` is an AI tool node (``…Tool``, ``tool`` or ``toolX`` by its short type)."""
    s = short_type(node)
    return s.endswith("Tool") or s == "tool" or bool(re.match(r"^tool[A-Z]", s))


def is_sub_node(node: dict[str, Any]) -> bool:
    """LangChain sub-nodes (models, memory, tools, embeddings…) connect *into* their root node."""
    return node_type(node).startswith("@n8n/n8n-nodes-langchain.") and (
        is_tool(node) or any(k in short_type(node).lower() for k in
                             ("lmchat", "lm", "memory", "embeddings", "outputparser", "textsplitter",
                              "documentloader", "document", "retriever"))) and node_type(node) not in AGENT_TYPES


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    kind: str  # main, ai_languageModel, ai_memory, ai_tool, ai_embedding…
    output: int


def edges(workflow: Workflow) -> list[Edge]:
    """Every connection of the workflow as an :class:`Edge` (source, target, kind, output index)."""
    out: list[Edge] = []
    for source, outputs in (workflow.get("connections") or {}).items():
        if not isinstance(outputs, dict):
            continue
        for kind, branches in outputs.items():
            for index, branch in enumerate(branches or []):
                for link in branch or []:
                    if isinstance(link, dict) and link.get("node"):
                        out.append(Edge(source, str(link["node"]), str(link.get("type") or kind), index))
    return out


def _walk_strings(obj: Any, path: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _walk_strings(v, f"{path}.{k}" if path else str(k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _walk_strings(v, f"{path}[{i}]")
    elif isinstance(obj, str):
        yield path, obj


def _names(items: list[str], limit: int = 5) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


# --------------------------------------------------------------------------- structure


def has_nodes(wf: Workflow, ctx: CheckContext) -> Outcome:
    n = len(nodes(wf))
    return (n > 0, f"{n} node(s)" if n else "the workflow has no nodes")


def has_trigger(wf: Workflow, ctx: CheckContext) -> Outcome:
    if not nodes(wf):
        return None, "no nodes"
    triggers = [str(n.get("name")) for n in nodes(wf) if is_trigger(n)]
    return (bool(triggers), f"trigger(s): {_names(triggers)}" if triggers else "no trigger node")


def has_start_node(wf: Workflow, ctx: CheckContext) -> Outcome:
    """Some trigger actually starts the flow: it has an outgoing connection (or is the only node)."""
    all_nodes = nodes(wf)
    triggers = [n for n in all_nodes if is_trigger(n)]
    if not triggers:
        return None, "no trigger to start from"
    if len(all_nodes) == 1:
        return True, "single trigger node"
    sources = {e.source for e in edges(wf) if e.kind == "main"}
    starting = [str(t.get("name")) for t in triggers if t.get("name") in sources]
    return (bool(starting), f"starts at {_names(starting)}" if starting else "no trigger connects to anything")


def no_disabled_nodes(wf: Workflow, ctx: CheckContext) -> Outcome:
    if not nodes(wf):
        return None, "no nodes"
    disabled = [str(n.get("name")) for n in nodes(wf) if n.get("disabled")]
    return (not disabled, f"disabled: {_names(disabled)}" if disabled else "no disabled node")


# --------------------------------------------------------------------------- connection topology


def all_nodes_connected(wf: Workflow, ctx: CheckContext) -> Outcome:
    all_nodes = nodes(wf)
    if len(all_nodes) < 2:
        return None, "fewer than two nodes"
    touched = {e.source for e in edges(wf)} | {e.target for e in edges(wf)}
    loose = [str(n.get("name")) for n in all_nodes if n.get("name") not in touched]
    return (not loose, f"not connected: {_names(loose)}" if loose else f"{len(all_nodes)} nodes connected")


def no_unreachable_nodes(wf: Workflow, ctx: CheckContext) -> Outcome:
    """Every node is reachable from a trigger along main connections; a sub-node counts as reached
    when the root it plugs into is."""
    all_nodes = nodes(wf)
    starts = [str(n.get("name")) for n in all_nodes if is_trigger(n)]
    if not all_nodes or not starts:
        return None, "no trigger to start from" if all_nodes else "no nodes"
    graph: dict[str, set[str]] = {}
    for e in edges(wf):
        if e.kind == "main":
            graph.setdefault(e.source, set()).add(e.target)
        else:  # sub-node → root: reaching the root reaches its sub-nodes
            graph.setdefault(e.target, set()).add(e.source)
    seen, queue = set(starts), deque(starts)
    while queue:
        for nxt in graph.get(queue.popleft(), ()):
            if nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    orphans = sorted(str(n.get("name")) for n in all_nodes if n.get("name") not in seen)
    return (not orphans, f"unreachable: {_names(orphans)}" if orphans else f"{len(all_nodes)} nodes reachable")


def error_routes_consistent(wf: Workflow, ctx: CheckContext) -> Outcome:
    """A node set to ``continueErrorOutput`` has its error output (its last main output) wired."""
    routed = [n for n in nodes(wf) if n.get("onError") == "continueErrorOutput"]
    if not routed:
        return None, "no node routes errors to an error output"
    conns = wf.get("connections") or {}
    unwired = []
    for n in routed:
        main = (conns.get(n.get("name")) or {}).get("main") or []
        if len(main) < 2 or not main[-1]:
            unwired.append(str(n.get("name")))
    return (not unwired, f"error output not wired: {_names(unwired)}" if unwired
            else f"{len(routed)} error output(s) wired")


# --------------------------------------------------------------------------- parameter correctness


def _set_assignments(node: dict[str, Any]) -> int:
    p = node.get("parameters") or {}
    if p.get("mode") == "raw":
        return 1 if str(p.get("jsonOutput") or "").strip() not in ("", "{}", "={}") else 0
    assignments = ((p.get("assignments") or {}).get("assignments")) or []
    legacy = sum(len(v or []) for v in (p.get("values") or {}).values()) if isinstance(p.get("values"), dict) else 0
    fields = len(((p.get("fields") or {}).get("values")) or []) if isinstance(p.get("fields"), dict) else 0
    return len(assignments) + legacy + fields


def no_empty_set_nodes(wf: Workflow, ctx: CheckContext) -> Outcome:
    sets = [n for n in nodes(wf) if node_type(n) == SET_TYPE]
    if not sets:
        return None, "no Set node"
    empty = [str(n.get("name")) for n in sets if _set_assignments(n) == 0]
    return (not empty, f"Set node(s) with no assignment: {_names(empty)}" if empty
            else f"{len(sets)} Set node(s) assign fields")


_NODE_REF = re.compile(r"""\$\(\s*(['"])(.+?)\1\s*\)|\$node\[\s*(['"])(.+?)\3\s*\]|\$node\.([A-Za-z_]\w*)""")


def _node_refs(text: str) -> list[str]:
    return [m.group(2) or m.group(4) or m.group(5) for m in _NODE_REF.finditer(text)]


def expressions_reference_existing_nodes(wf: Workflow, ctx: CheckContext) -> Outcome:
    names = {str(n.get("name")) for n in nodes(wf)}
    refs: list[tuple[str, str]] = []
    for n in nodes(wf):
        for _, value in _walk_strings(n.get("parameters") or {}):
            refs += [(str(n.get("name")), r) for r in _node_refs(value)]
    if not refs:
        return None, "no expression references another node"
    missing = sorted({f"{owner} → {ref!r}" for owner, ref in refs if ref not in names})
    return (not missing, f"unknown node(s): {_names(missing)}" if missing else f"{len(refs)} node reference(s) resolve")


_JSON_FIELD = re.compile(r"\$json(?:\.([A-Za-z_]\w*)|\[\s*['\"]([^'\"]+)['\"]\s*\])")


def _set_outputs(node: dict[str, Any]) -> set[str] | None:
    """The field names a Set node emits, or None when it passes other fields through (unknowable)."""
    p = node.get("parameters") or {}
    if p.get("mode") == "raw" or p.get("includeOtherFields") or p.get("include") in ("all", "selected", "except"):
        return None
    names = {str(a.get("name")).split(".")[0] for a in ((p.get("assignments") or {}).get("assignments") or [])
             if isinstance(a, dict) and a.get("name")}
    return names or None


def valid_field_references(wf: Workflow, ctx: CheckContext) -> Outcome:
    """``$json.<field>`` (in an expression or a Code node) right after a Set node that keeps only its
    own fields names one of them."""
    by_name = {str(n.get("name")): n for n in nodes(wf)}
    parents: dict[str, list[str]] = {}
    for e in edges(wf):
        if e.kind == "main":
            parents.setdefault(e.target, []).append(e.source)
    checked = 0
    bad: list[str] = []
    for n in nodes(wf):
        sources = parents.get(str(n.get("name")), [])
        if len(sources) != 1 or node_type(by_name.get(sources[0], {})) != SET_TYPE:
            continue
        emitted = _set_outputs(by_name[sources[0]])
        if emitted is None:
            continue
        code = node_type(n) in CODE_TYPES
        for _, value in _walk_strings(n.get("parameters") or {}):
            if not code and not value.startswith("=") and "{{" not in value:
                continue  # plain text, not an expression
            for m in _JSON_FIELD.finditer(value):
                checked += 1
                name = m.group(1) or m.group(2)
                if name not in emitted:
                    bad.append(f"{n.get('name')}: $json.{name} (emitted: {', '.join(sorted(emitted))})")
    if not checked:
        return None, "no field reference with a known upstream shape"
    return (not bad, _names(bad, 3) if bad else f"{checked} field reference(s) match their Set node")


def valid_node_config(wf: Workflow, ctx: CheckContext) -> Outcome:
    all_nodes = nodes(wf)
    if not all_nodes:
        return None, "no nodes"
    problems: list[str] = []
    seen: set[str] = set()
    for n in all_nodes:
        name = str(n.get("name") or "")
        if not name:
            problems.append("a node without a name")
        elif name in seen:
            problems.append(f"duplicate name {name!r}")
        seen.add(name)
        if not node_type(n):
            problems.append(f"{name}: no type")
        if not isinstance(n.get("typeVersion"), (int, float)):
            problems.append(f"{name}: no typeVersion")
        pos = n.get("position")
        if not (isinstance(pos, list) and len(pos) == 2 and all(isinstance(x, (int, float)) for x in pos)):
            problems.append(f"{name}: no [x, y] position")
        if not isinstance(n.get("parameters", {}), dict):
            problems.append(f"{name}: parameters is not an object")
    names = {str(n.get("name")) for n in all_nodes}
    for e in edges(wf):
        for end in (e.source, e.target):
            if end not in names and end not in {str(x.get("name")) for x in wf.get("nodes") or [] if isinstance(x, dict)}:
                problems.append(f"connection names unknown node {end!r}")
    problems = sorted(set(problems))
    return (not problems, _names(problems, 4) if problems else f"{len(all_nodes)} node(s) well-formed")


def no_invalid_from_ai(wf: Workflow, ctx: CheckContext) -> Outcome:
    users = [n for n in nodes(wf) if any("$fromAI(" in v or "$fromai(" in v.lower()
                                         for _, v in _walk_strings(n.get("parameters") or {}))]
    if not users:
        return None, "no $fromAI() in any node"
    wrong = [str(n.get("name")) for n in users if not is_tool(n)]
    return (not wrong, f"$fromAI() outside a tool node: {_names(wrong)}" if wrong
            else f"$fromAI() only in tool nodes ({len(users)})")


def switch_fallback_output_enabled(wf: Workflow, ctx: CheckContext) -> Outcome:
    switches = [n for n in nodes(wf) if node_type(n) == SWITCH_TYPE and (n.get("parameters") or {}).get("mode", "rules") == "rules"]
    if not switches:
        return None, "no Switch node in rules mode"
    missing = []
    for n in switches:
        options = (n.get("parameters") or {}).get("options") or {}
        if options.get("fallbackOutput") in (None, "none"):
            missing.append(str(n.get("name")))
    return (not missing, f"no fallback output: {_names(missing)}" if missing else "every Switch has a fallback output")


# --------------------------------------------------------------------------- ai nodes


def _agents(wf: Workflow) -> list[dict[str, Any]]:
    return [n for n in nodes(wf) if node_type(n) in AGENT_TYPES]


def _inputs(wf: Workflow, target: str, kind: str) -> list[str]:
    return [e.source for e in edges(wf) if e.target == target and e.kind == kind]


def agent_has_dynamic_prompt(wf: Workflow, ctx: CheckContext) -> Outcome:
    agents = _agents(wf)
    if not agents:
        return None, "no agent nodes"
    static = []
    for a in agents:
        p = a.get("parameters") or {}
        if p.get("promptType", "auto") in ("auto", "guardrails"):
            continue  # takes the chat trigger's input
        text = str(p.get("text") or "")
        if not (text.startswith("=") and "{{" in text):
            static.append(str(a.get("name")))
    return (not static, f"fixed prompt (no expression): {_names(static)}" if static
            else f"{len(agents)} agent prompt(s) take the incoming data")


def agent_has_language_model(wf: Workflow, ctx: CheckContext) -> Outcome:
    agents = _agents(wf)
    if not agents:
        return None, "no agent nodes"
    missing = [str(a.get("name")) for a in agents if not _inputs(wf, str(a.get("name")), "ai_languageModel")]
    return (not missing, f"no language model: {_names(missing)}" if missing else f"{len(agents)} agent(s) have a model")


def _memories(wf: Workflow) -> list[dict[str, Any]]:
    return [n for n in nodes(wf) if node_type(n).startswith("@n8n/n8n-nodes-langchain.memory")]


def memory_properly_connected(wf: Workflow, ctx: CheckContext) -> Outcome:
    memories = _memories(wf)
    if not memories:
        return None, "no memory nodes"
    loose = [str(m.get("name")) for m in memories
             if not any(e.source == m.get("name") and e.kind == "ai_memory" for e in edges(wf))]
    return (not loose, f"memory not plugged into an agent: {_names(loose)}" if loose
            else f"{len(memories)} memory node(s) connected")


def vector_store_has_embeddings(wf: Workflow, ctx: CheckContext) -> Outcome:
    stores = [n for n in nodes(wf) if "vectorStore" in short_type(n)]
    if not stores:
        return None, "no vector store nodes"
    missing = [str(s.get("name")) for s in stores if not _inputs(wf, str(s.get("name")), "ai_embedding")]
    return (not missing, f"no embeddings: {_names(missing)}" if missing else f"{len(stores)} vector store(s) have embeddings")


_NO_PARAM_TOOLS = ("toolCalculator", "toolWikipedia", "toolThink", "toolSerpApi", "toolWolframAlpha")


def tools_have_parameters(wf: Workflow, ctx: CheckContext) -> Outcome:
    tools = [n for n in nodes(wf) if is_tool(n) and short_type(n) not in _NO_PARAM_TOOLS]
    if not tools:
        return None, "no tool nodes"

    def configured(n: dict[str, Any]) -> bool:
        return any(v.strip() for k, v in _walk_strings(n.get("parameters") or {}) if not k.endswith("description"))

    empty = [str(t.get("name")) for t in tools if not configured(t)]
    return (not empty, f"tool(s) without parameters: {_names(empty)}" if empty else f"{len(tools)} tool(s) configured")


def memory_session_key_expression(wf: Workflow, ctx: CheckContext) -> Outcome:
    custom = [m for m in _memories(wf) if (m.get("parameters") or {}).get("sessionIdType") == "customKey"]
    if not custom:
        return None, "no memory with a custom session key"
    fixed = [str(m.get("name")) for m in custom if not str((m.get("parameters") or {}).get("sessionKey") or "").startswith("=")]
    return (not fixed, f"session key is a constant (all users share one memory): {_names(fixed)}" if fixed
            else "session keys are expressions")


# --------------------------------------------------------------------------- craftsmanship, security

_LOGIC = re.compile(r"\b(for|while|if|switch|try|catch|await|new Date|Math\.|JSON\.parse|require|fetch|"
                    r"filter|reduce|sort|map|split|replace|match|test|crypto|Buffer|slice|substring)\b|\?|/[^/\n]+/[gimsuy]*")


def no_unnecessary_code_nodes(wf: Workflow, ctx: CheckContext) -> Outcome:
    codes = [n for n in nodes(wf) if node_type(n) in CODE_TYPES]
    if not codes:
        return None, "no Code nodes"
    if ctx.annotations.get("code_necessary"):
        return True, "the case marks a Code node as necessary"
    trivial = []
    for n in codes:
        p = n.get("parameters") or {}
        code = str(p.get("jsCode") or p.get("pythonCode") or p.get("functionCode") or "")
        body = re.sub(r"//.*|/\*.*?\*/|#.*", "", code, flags=re.S)
        if not _LOGIC.search(body):
            trivial.append(str(n.get("name")))
    return (not trivial, f"only sets fixed fields (a Set node would do): {_names(trivial)}" if trivial
            else f"{len(codes)} Code node(s) do real work")


_SECRET_PARAM = re.compile(r"(api[_-]?key|token|secret|password|authorization|bearer|client[_-]?secret)", re.I)
_SECRET_VALUE = re.compile(r"(sk-[A-Za-z0-9_-]{16,}|xox[abpr]-[A-Za-z0-9-]{10,}|gh[pousr]_[A-Za-z0-9]{20,}|"
                           r"Bearer\s+[A-Za-z0-9._-]{16,}|AKIA[0-9A-Z]{16})")


def no_hardcoded_credentials(wf: Workflow, ctx: CheckContext) -> Outcome:
    if not nodes(wf):
        return None, "no nodes"
    hits: list[str] = []
    for n in nodes(wf):
        for path, value in _walk_strings(n.get("parameters") or {}):
            if value.startswith("="):  # an expression, resolved at run time
                continue
            leaf = path.rsplit(".", 1)[-1]
            if _SECRET_VALUE.search(value) or (_SECRET_PARAM.search(leaf) and len(value) >= 12):
                hits.append(f"{n.get('name', '?')}.{path}")
    return (not hits, f"literal secrets in: {_names(hits)}" if hits else "no literal secret in any parameter")


_ASKS_FOR_AUTH = re.compile(r"\b(auth\w*|header auth|basic auth|api[ -]?key|token|secret|password|protect\w*|secure\w*)\b", re.I)


def inbound_trigger_auth_defaults(wf: Workflow, ctx: CheckContext) -> Outcome:
    """An inbound trigger keeps n8n's default (open) unless the user asked to protect it; when it
    is protected, a credential is attached."""
    inbound = [n for n in nodes(wf) if node_type(n) in INBOUND_TRIGGERS]
    if not inbound:
        return None, "no inbound trigger (webhook, form, chat)"
    asked = bool(_ASKS_FOR_AUTH.search(ctx.prompt or ""))
    problems = []
    for n in inbound:
        auth = str((n.get("parameters") or {}).get("authentication") or "none")
        if auth != "none" and not n.get("credentials"):
            problems.append(f"{n.get('name')}: {auth} auth without a credential")
        elif auth == "none" and asked:
            problems.append(f"{n.get('name')}: open although the request asks for authentication")
    return (not problems, _names(problems, 3) if problems else
            ("protected as asked" if asked else "default authentication (open), as nothing asked otherwise"))


# --------------------------------------------------------------------------- registry

_D: Literal["deterministic"] = "deterministic"
CHECKS: tuple[CheckSpec, ...] = (
    CheckSpec("has_nodes", "structure", _D, "The workflow has at least one node", has_nodes),
    CheckSpec("has_trigger", "structure", _D, "The workflow contains a trigger node", has_trigger),
    CheckSpec("has_start_node", "structure", _D, "A trigger starts the flow (connects onward)", has_start_node),
    CheckSpec("no_disabled_nodes", "structure", _D, "No node is disabled", no_disabled_nodes),
    CheckSpec("all_nodes_connected", "connection_topology", _D, "Every node has a connection", all_nodes_connected),
    CheckSpec("no_unreachable_nodes", "connection_topology", _D, "Every node is reachable from a trigger", no_unreachable_nodes),
    CheckSpec("error_routes_consistent", "connection_topology", _D, "Error outputs that are enabled are wired", error_routes_consistent),
    CheckSpec("handles_multiple_items", "connection_topology", "llm", "The workflow handles several items per run correctly"),
    CheckSpec("no_empty_set_nodes", "parameter_correctness", _D, "Set nodes assign at least one field", no_empty_set_nodes),
    CheckSpec("expressions_reference_existing_nodes", "parameter_correctness", _D, "Expressions name nodes that exist", expressions_reference_existing_nodes),
    CheckSpec("valid_field_references", "parameter_correctness", _D, "Expressions reference fields the upstream node emits", valid_field_references),
    CheckSpec("valid_node_config", "parameter_correctness", _D, "Nodes are well-formed (name, type, version, position)", valid_node_config),
    CheckSpec("no_invalid_from_ai", "parameter_correctness", _D, "Only tool nodes use $fromAI()", no_invalid_from_ai),
    CheckSpec("switch_fallback_output_enabled", "parameter_correctness", _D, "Switch nodes route unmatched items to a fallback output", switch_fallback_output_enabled),
    CheckSpec("valid_data_flow", "parameter_correctness", "llm", "Data flows between nodes in the shapes each node expects"),
    CheckSpec("correct_node_operations", "parameter_correctness", "llm", "Each node uses the resource/operation the task needs"),
    CheckSpec("fulfills_user_request", "intent_match", "llm", "The workflow does what the user asked"),
    CheckSpec("response_describes_changes_accurately", "communication", "llm", "The builder's narration makes no false claim about what it built"),
    CheckSpec("agent_has_dynamic_prompt", "ai_nodes", _D, "Agent prompts take the incoming data (an expression)", agent_has_dynamic_prompt),
    CheckSpec("agent_has_language_model", "ai_nodes", _D, "Agent nodes have a language model connected", agent_has_language_model),
    CheckSpec("memory_properly_connected", "ai_nodes", _D, "Memory nodes are plugged into an agent", memory_properly_connected),
    CheckSpec("vector_store_has_embeddings", "ai_nodes", _D, "Vector stores have an embeddings model", vector_store_has_embeddings),
    CheckSpec("tools_have_parameters", "ai_nodes", _D, "Tool nodes have their parameters configured", tools_have_parameters),
    CheckSpec("memory_session_key_expression", "ai_nodes", _D, "A custom memory session key is an expression", memory_session_key_expression),
    CheckSpec("descriptive_node_names", "nodes_craftsmanship", "llm", "Node names say what each node does"),
    CheckSpec("no_unnecessary_code_nodes", "nodes_craftsmanship", _D, "No Code node where a built-in node would do", no_unnecessary_code_nodes),
    CheckSpec("no_hardcoded_credentials", "security", _D, "No secret is pasted into a node parameter", no_hardcoded_credentials),
    CheckSpec("inbound_trigger_auth_defaults", "security", _D, "Inbound triggers use authentication as asked", inbound_trigger_auth_defaults),
)
BY_NAME = {c.name: c for c in CHECKS}
LLM_CHECKS = tuple(c for c in CHECKS if c.kind == "llm")


def _result(spec: CheckSpec, passed: bool | None, detail: str, *, errored: bool = False) -> StructuralCheck:
    return StructuralCheck(name=spec.name, passed=passed, detail=detail, dimension=spec.dimension, kind=spec.kind,
                           errored=errored)


def deterministic_checks(workflow: Workflow, ctx: CheckContext | None = None) -> list[StructuralCheck]:
    """The 22 deterministic checks (pure: same workflow, same answers)."""
    ctx = ctx or CheckContext()
    out = []
    for spec in CHECKS:
        if spec.run is None:
            continue
        try:
            passed, detail = spec.run(workflow, ctx)
        except Exception as exc:  # a malformed workflow must not break verification
            out.append(_result(spec, None, f"check crashed: {type(exc).__name__}: {exc}"[:300], errored=True))
            continue
        out.append(_result(spec, passed, detail))
    return out


LLM_CHECK_SYSTEM = (
    "You grade an n8n workflow built by an AI builder against numbered yes/no checks. For each check "
    "answer pass true (yes) or false (no) with a one-line reason naming the nodes involved. Answer ONLY "
    'with JSON: {"verdicts": [{"index": 0, "pass": true, "reason": "one line"}, ...]} covering every index.'
)


def llm_check_prompt(workflow: Workflow, ctx: CheckContext, specs: list[CheckSpec]) -> str:
    """The user prompt for the LLM checks in one call: the user's request, the builder's narration if
    any, the workflow (cut to 50,000 characters) and the numbered checks (0-based)."""
    listing = "\n".join(f"{i}. {s.name}: {s.description}" for i, s in enumerate(specs))
    narration = f"\n## The builder's narration\n{ctx.narration[:8000]}\n" if ctx.narration else ""
    return (f"## User request\n{ctx.prompt[:8000]}\n{narration}\n## Workflow JSON\n"
            f"{json.dumps(workflow, indent=1)[:50000]}\n\n## Checks\n{listing}\n")


async def llm_checks(workflow: Workflow, ctx: CheckContext, judge: Judge | None) -> list[StructuralCheck]:
    """The 6 LLM checks in one judge call; N/A without a judge key, ``error`` when the judge failed."""
    has_key = judge is not None and bool(judge.config.api_key)
    out: list[StructuralCheck] = []
    asked: list[CheckSpec] = []
    for spec in LLM_CHECKS:
        if not has_key:
            out.append(_result(spec, None, "N/A: no judge key (ANTHROPIC_API_KEY)"))
        elif spec.name == "response_describes_changes_accurately" and not ctx.narration:
            out.append(_result(spec, None, "N/A: no builder narration captured"))
        else:
            asked.append(spec)
    if asked and judge is not None:
        verdicts = await judge.judge(LLM_CHECK_SYSTEM, llm_check_prompt(workflow, ctx, asked), len(asked))
        for spec, v in zip(asked, verdicts):
            if v.category == "verification_failure" or v.verdict is Verdict.incomplete:
                out.append(_result(spec, None, v.reason, errored=True))
            else:
                out.append(_result(spec, v.verdict is Verdict.passed, v.reason))
    order = {c.name: i for i, c in enumerate(CHECKS)}
    return sorted(out, key=lambda c: order[c.name])


async def run_workflow_checks(workflow: Workflow, ctx: CheckContext | None = None,
                              judge: Judge | None = None) -> list[StructuralCheck]:
    """All 28 checks of one built workflow, in rubric order. Never raises, never touches a verdict."""
    ctx = ctx or CheckContext()
    found = {c.name: c for c in deterministic_checks(workflow, ctx)}
    try:
        found.update({c.name: c for c in await llm_checks(workflow, ctx, judge)})
    except Exception as exc:  # the judge never raises by contract; belt and braces
        for spec in LLM_CHECKS:
            found[spec.name] = _result(spec, None, f"not measured: {type(exc).__name__}", errored=True)
    return [found[c.name] for c in CHECKS]


def feedback(checks: list[StructuralCheck]) -> dict[str, int]:
    """LangSmith feedback: ``evals.workflows.<dimension>.<check>`` → 1 pass / 0 fail; N/A and
    unmeasured checks are omitted so column means are pass rates."""
    return {f"evals.workflows.{c.dimension}.{c.name}": 1 if c.passed else 0
            for c in checks if c.status in ("pass", "fail")}


def check_context(case: Any, narration: str | None = None) -> CheckContext:
    """The context of a case's checks: its opening prompt and annotations."""
    try:
        prompt = case.opening_prompt()
    except (ValueError, AttributeError):
        prompt = ""
    if isinstance(prompt, list):
        prompt = "\n".join(prompt)
    annotations = getattr(case, "annotations", None)
    return CheckContext(prompt=str(prompt), narration=narration,
                        annotations=annotations if isinstance(annotations, dict) else {})


#: Size cap of one kept execution (node outputs are mock data: big ones are cut, not dropped).
EXECUTION_KEEP_CHARS = 60_000


def execution_record(result: Any) -> dict[str, Any]:
    """What the report shows of one mock execution: per-node outputs, intercepted requests and mock
    responses, errors, and the Phase-1 hints; JSON-safe and size-capped."""
    nodes_out: dict[str, Any] = {}
    for name, node in (getattr(result, "node_results", None) or {}).items():
        dumped = node.model_dump(by_alias=True, mode="json") if node is not None and hasattr(node, "model_dump") else node
        nodes_out[name] = dumped
    hints = getattr(result, "hints", None)
    record: dict[str, Any] = {
        "success": bool(getattr(result, "success", False)),
        "errors": list(getattr(result, "errors", []) or []),
        "mockErrors": list(getattr(result, "mock_errors", []) or []),
        "nodeResults": nodes_out,
        "hints": hints.model_dump(by_alias=True, mode="json") if hints is not None and hasattr(hints, "model_dump") else hints,
    }
    text = json.dumps(record, default=str)
    if len(text) > EXECUTION_KEEP_CHARS:
        for node in record["nodeResults"].values():
            if isinstance(node, dict) and "outputs" in node:
                node["outputs"] = json.dumps(node["outputs"], default=str)[:2000] + " …(cut)"
        record["truncated"] = True
    return record
