"""Deterministic checks of a built workflow's JSON: no model involved, same answer every time."""

from __future__ import annotations

import re
from collections import deque
from typing import Any

from orchestrator.results.model import StructuralCheck

#: Parameter names whose non-expression value is a credential pasted into a node.
_SECRET_PARAM = re.compile(r"(api[_-]?key|token|secret|password|authorization|bearer)", re.I)
_SECRET_VALUE = re.compile(r"(sk-[A-Za-z0-9]{16,}|xox[abpr]-[A-Za-z0-9-]{10,}|gh[pousr]_[A-Za-z0-9]{20,}|Bearer\s+[A-Za-z0-9._-]{16,})")


def _is_trigger(node: dict[str, Any]) -> bool:
    node_type = str(node.get("type", ""))
    return node_type.endswith("Trigger") or node_type.endswith(".webhook") or "trigger" in node_type.lower()


def _walk_strings(obj: Any, path: str = ""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _walk_strings(v, f"{path}.{k}" if path else str(k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _walk_strings(v, f"{path}[{i}]")
    elif isinstance(obj, str):
        yield path, obj


def check_trigger(workflow: dict[str, Any]) -> StructuralCheck:
    nodes = workflow.get("nodes") or []
    triggers = [n.get("name", "?") for n in nodes if _is_trigger(n)]
    return StructuralCheck(
        name="has_trigger", passed=bool(triggers),
        detail=f"triggers: {', '.join(triggers)}" if triggers else "no trigger node",
    )


def check_reachable(workflow: dict[str, Any]) -> StructuralCheck:
    """Every node is reachable from a trigger along ``connections`` (any output type)."""
    nodes = [n for n in workflow.get("nodes") or [] if not str(n.get("type", "")).endswith("stickyNote")]
    if not nodes:
        return StructuralCheck(name="all_nodes_reachable", passed=None, detail="no nodes")
    edges: dict[str, set[str]] = {}
    for source, outputs in (workflow.get("connections") or {}).items():
        for branches in (outputs or {}).values():
            for branch in branches or []:
                for link in branch or []:
                    if isinstance(link, dict) and link.get("node"):
                        edges.setdefault(source, set()).add(link["node"])
                        # sub-nodes (AI tools, models, memory) connect *into* their root: treat both ways
                        edges.setdefault(link["node"], set()).add(source)
    starts = [n["name"] for n in nodes if _is_trigger(n)]
    if not starts:
        return StructuralCheck(name="all_nodes_reachable", passed=None, detail="no trigger to start from")
    seen = set(starts)
    queue = deque(starts)
    while queue:
        for nxt in edges.get(queue.popleft(), ()):
            if nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    orphans = sorted(n["name"] for n in nodes if n["name"] not in seen)
    return StructuralCheck(
        name="all_nodes_reachable", passed=not orphans,
        detail=f"unreachable: {', '.join(orphans)}" if orphans else f"{len(nodes)} nodes reachable",
    )


def check_no_hardcoded_credentials(workflow: dict[str, Any]) -> StructuralCheck:
    hits: list[str] = []
    for node in workflow.get("nodes") or []:
        for path, value in _walk_strings(node.get("parameters") or {}):
            if value.startswith("="):  # an expression, resolved at run time
                continue
            leaf = path.rsplit(".", 1)[-1]
            if _SECRET_VALUE.search(value) or (_SECRET_PARAM.search(leaf) and len(value) >= 12):
                hits.append(f"{node.get('name', '?')}.{path}")
    return StructuralCheck(
        name="no_hardcoded_credentials", passed=not hits,
        detail=f"literal secrets in: {', '.join(hits)}" if hits else "none found",
    )


def structural_checks(workflow: dict[str, Any]) -> list[StructuralCheck]:
    return [check_trigger(workflow), check_reachable(workflow), check_no_hardcoded_credentials(workflow)]
