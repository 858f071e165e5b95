"""What a lane is: the spec it is provisioned from and the handle the rest of the run holds."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

from orchestrator.n8n.owner import OwnerCredentials


class LaneState(str, enum.Enum):
    """Life of one lane. Only ``ready`` lanes take builds."""

    provisioning = "provisioning"
    starting = "starting"
    ready = "ready"
    quarantined = "quarantined"
    dead = "dead"
    stopped = "stopped"


@dataclass(frozen=True)
class Resources:
    cpu_request: str = "500m"
    cpu_limit: str = "2"
    memory_request: str = "1Gi"
    memory_limit: str = "2Gi"


@dataclass(frozen=True)
class LaneSpec:
    """How to provision every lane of a pool.

    ``env`` is the merged environment (profile + per-run overrides); secrets are passed separately
    in ``secret_env`` so they can be routed to a Kubernetes Secret and kept out of logs.
    """

    n8n_version: str
    profile: str = "eval"
    env: dict[str, str] = field(default_factory=dict)
    secret_env: dict[str, str] = field(default_factory=dict, repr=False)
    image: str = "n8n-eval-lane:local"
    base_port: int = 5700
    resources: Resources = field(default_factory=Resources)
    ready_timeout_s: float = 180.0


@dataclass
class Lane:
    """One provisioned n8n server. ``handle`` is backend-private (a PID, a container id, a pod name)."""

    lane_id: str
    index: int
    base_url: str
    backend: str
    run_id: str
    state: LaneState = LaneState.provisioning
    owner: OwnerCredentials | None = None
    handle: str = ""
    started_at: float = field(default_factory=time.time)
    fingerprint: dict[str, str] = field(default_factory=dict)
    #: Other services of the lane, by name (``build-runner``: the lane pod's build runner, where
    #: the ``remote`` builder sends its MCP builds). Set by the backend that runs them.
    endpoints: dict[str, str] = field(default_factory=dict)

    @property
    def uptime_s(self) -> float:
        """Seconds since the lane started (wall clock)."""
        return time.time() - self.started_at

    def describe(self) -> str:
        return f"lane {self.lane_id} ({self.backend}, {self.base_url})"
