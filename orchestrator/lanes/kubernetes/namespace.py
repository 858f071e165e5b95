"""Which namespace a run's objects (or the janitor's pass) are in: one rule for both."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from orchestrator.lanes.kubernetes import objects
from orchestrator.lanes.kubernetes.api import kubeconfig_namespace

#: the service account's namespace, mounted into every pod that has one
SA_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def resolve_namespace(explicit: str | None, environ: Mapping[str, str], context: str | None, *, local: bool) -> str:
    """``explicit`` (``--namespace`` or its env variable), else the pod's own (``POD_NAMESPACE``,
    else its service account's), else the kubeconfig context's, else ``default``.

    Args:
        local: whether this process's own files may answer (the service account's and the
            kubeconfig): False when the caller was handed an API client for someone else's cluster.
    """
    if explicit:
        return explicit
    if environ.get(objects.ENV_POD_NAMESPACE):
        return environ[objects.ENV_POD_NAMESPACE]
    if local and SA_NAMESPACE_FILE.exists():
        return SA_NAMESPACE_FILE.read_text().strip()
    return (kubeconfig_namespace(context) if local else None) or "default"
