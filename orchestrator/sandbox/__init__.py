"""The embedded n8n-sandbox service: isolated command execution for n8n's Instance AI builder.

``SandboxService`` starts one service per lane (``python -m orchestrator.sandbox serve``), every
command runs in a bubblewrap jail (:mod:`orchestrator.sandbox.isolation`), workspaces get their npm
packages from a read-only template (:mod:`orchestrator.sandbox.template`), and ``lane_env`` gives
the env a lane needs to use it.
"""

from orchestrator.sandbox.service import (
    KEY_ENV,
    SandboxService,
    SandboxServiceError,
    lane_env,
)

__all__ = ["KEY_ENV", "SandboxService", "SandboxServiceError", "lane_env"]
