"""RBAC for the fake API server (tests/support/k8s_fake_api.py), from the Roles and RoleBindings of a Helm render.

:func:`authorizer` turns rendered documents into the fake's ``state.authorizer``: a request is allowed
only when its bearer token is a ServiceAccount's (``tokens``: token → ``namespace/name``) and a
RoleBinding in the request's namespace binds that account to a Role whose rules grant the request's
(apiGroup, resource, verb) — ``resourceNames`` narrowing it to those names, as the API server's RBAC
authorizer does (a ``list``/``watch``/``create``/``deletecollection`` request has no name, so a
named rule never grants it). Anything else is refused with the API server's own wording::

    pods is forbidden: User "system:serviceaccount:evals:x" cannot list resource "pods" in API group ""
    in the namespace "evals"

Only namespaced Roles are modelled (the chart renders no ClusterRole); ``*`` in a rule is honoured.
This follows Kubernetes' RBAC semantics (rbac.authorization.k8s.io/v1), not an n8n file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from support.k8s_fake_api import Request, attributes


def _grants(rule: Mapping[str, Any], group: str, resource: str, verb: str, name: str | None) -> bool:
    def has(key: str, value: str) -> bool:
        values = rule.get(key) or []
        return "*" in values or value in values

    if not (has("apiGroups", group) and has("resources", resource) and has("verbs", verb)):
        return False
    names = rule.get("resourceNames") or []
    return not names or (name is not None and name in names)


def authorizer(docs: Iterable[Mapping[str, Any]], tokens: Mapping[str, str]) -> Callable[[Request, str | None], str | None]:
    """The fake's authorizer for these rendered Roles/RoleBindings and ServiceAccount tokens."""
    docs = list(docs)
    roles = {(d["metadata"].get("namespace"), d["metadata"]["name"]): d.get("rules") or []
             for d in docs if d["kind"] == "Role"}
    bindings = [d for d in docs if d["kind"] == "RoleBinding"]

    def check(request: Request, token: str | None) -> str | None:
        attrs = attributes(request)
        if attrs is None:
            return None
        account = tokens.get(token or "")
        user = f"system:serviceaccount:{account.replace('/', ':')}" if account else "system:anonymous"
        for binding in bindings:
            ns = binding["metadata"].get("namespace")
            if ns not in (None, attrs.namespace):  # a render without a namespace: the release's, the request's
                continue
            subjects = {f"{s.get('namespace')}/{s['name']}" for s in binding.get("subjects") or []
                        if s.get("kind") == "ServiceAccount"}
            if account not in subjects:
                continue
            ref = binding["roleRef"]
            rules = roles.get((ns, ref["name"])) if ref.get("kind") == "Role" else None
            if any(_grants(rule, attrs.group, attrs.resource, attrs.verb, attrs.name) for rule in rules or []):
                return None
        what = attrs.resource.replace("/", ' with subresource "') if "/" in attrs.resource else attrs.resource
        return (f'{attrs.resource}{" " + repr(attrs.name) if attrs.name else ""} is forbidden: User "{user}" cannot '
                f'{attrs.verb} resource "{what}" in API group "{attrs.group}" in the namespace "{attrs.namespace}"')

    return check
