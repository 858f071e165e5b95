"""Everything one ``orchestrator run`` was asked to do, checked once at the edge.

``RunConfig`` is a frozen pydantic model: field ranges and types are declared (``Field(ge=…)``), and
a value out of range is a one-line :class:`ConfigError` naming the flag (``--iterations: must be ≥ 1,
got 0``), at construction and at every :meth:`RunConfig.replace`. What depends on several fields, on
the plug-in registries or on files is decided once by :func:`orchestrator.run.resolve.resolve` and
checked by :func:`orchestrator.run.resolve.preflight`.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from orchestrator.builders.builder import DEFAULT_BUILDER
from orchestrator.errors import ConfigError
from orchestrator.lanes.backend import DEFAULT_BACKEND
from orchestrator.plugin_flags import plugin_option_names, secret_option_names

DEFAULT_BUILD_MODEL = "claude-opus-4-8"
DEFAULT_BASELINE_PREFIX = "instance-ai-baseline-"


#: flags whose name is not ``--`` + the field name with dashes
_FLAG_OF = {"cases_paths": "CASES", "outage_waits_s": "--outage-waits"}
#: fields with no flag (set by tests, the A/B runner or a resumed run): named as they are
_NO_FLAG = {"judge_attempt_timeout_s", "lane_retries", "health_interval_s",
            "reprobe_interval_s", "abort_after_all_quarantined_s", "claude_bin", "model_route_tag",
            "lane_model_key_env", "gateway_hold_s"}


def _flag(field_name: str) -> str:
    if field_name in _NO_FLAG:
        return field_name
    return _FLAG_OF.get(field_name, "--" + field_name.replace("_", "-"))


def _config_error(exc: ValidationError) -> ConfigError:
    """The first problem, as one line naming the flag: ``--lanes: must be ≥ 1, got 0``."""
    first = exc.errors()[0]
    name = str(first["loc"][0]) if first["loc"] else "?"
    ctx = first.get("ctx") or {}
    got = first.get("input")
    bounds = {"greater_than_equal": ("≥", "ge"), "greater_than": (">", "gt"), "less_than_equal": ("≤", "le"),
              "less_than": ("<", "lt")}
    if first["type"] in bounds:
        sign, key = bounds[first["type"]]
        message = f"must be {sign} {ctx.get(key)}, got {got}"
    elif first["type"] == "value_error":
        message = f"{ctx.get('error')}: {got!r}"
    elif first["type"] == "literal_error":
        message = f"must be {ctx.get('expected')}, got {got!r}"
    else:
        message = f"{first['msg'].lower()}, got {got!r}"
    return ConfigError(f"{_flag(name)}: {message}")


class RunConfig(BaseModel):
    """The flags of one run, as given (frozen). :func:`orchestrator.run.resolve.resolve` decides
    what they imply, once, into a :class:`~orchestrator.run.resolve.ResolvedRun`."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True, extra="forbid")

    cases_paths: list[Path] = Field(default_factory=lambda: [Path("cases")])
    source: Literal["disk", "langtracer"] = "disk"
    suite: str | None = None
    filter: str | None = None
    exclude: str | None = None
    tier: str | None = None
    iterations: int = Field(1, ge=1)
    backend: str = DEFAULT_BACKEND
    builder: str = DEFAULT_BUILDER  # plug-ins by name (``--prebuilt-workflows`` selects its builder)
    #: the plug-ins' own options by field name (their flags: ``orchestrator.plugin_flags``); each
    #: plug-in takes the fields of its options model (``run/stack.py``)
    plugin_options: dict[str, Any] = Field(default_factory=dict, repr=False)
    lanes: int = Field(2, ge=1)
    profile: str = "eval"
    env: list[str] = Field(default_factory=list)
    concurrency: int | None = Field(None, ge=1)  # fixed; default: the model gateway's rule (else lanes × 2)
    per_lane_builds: int = Field(4, ge=1)
    #: the verification budget per unit: each execution scenario's (``complex`` cases get 1.5×)
    timeout_ms: int = Field(900_000, ge=1)
    #: the build budget, for every builder (None: the builder's default, ``Builder.default_build_timeout_ms``):
    #: a claude build's wall clock per attempt; a chat build's per user turn (the conversation gets 2×,
    #: ``complex`` cases 1.5×); 0 disables it
    build_timeout_ms: int | None = Field(None, ge=0)
    build_max_attempts: int = Field(3, ge=1)
    build_model: str = Field(default_factory=lambda: os.environ.get("ANTHROPIC_MODEL") or DEFAULT_BUILD_MODEL)
    output_dir: Path | None = None
    keep_workflows: bool = False
    #: judge MCP builds' process expectations too (reported, never scored: n8n skips them)
    judge_mcp_process: bool = False
    experiment_name: str | None = None
    dataset: str | None = None
    #: write the selected cases into the LangSmith dataset (off: runs only read it)
    sync_dataset: bool = False
    baseline: Path | None = None
    baseline_prefix: str = DEFAULT_BASELINE_PREFIX
    #: History for longest-expected-first (None: orchestrator.results.history.default_durations_source).
    durations_from: Path | None = None
    max_cost_usd: float | None = Field(None, gt=0)
    metrics_port: int | None = Field(None, ge=0, le=65535)
    #: Bind address of /metrics (None: ORCHESTRATOR_METRICS_HOST, else 127.0.0.1).
    metrics_host: str | None = None
    pushgateway: str | None = None
    resume: str | None = None
    #: With ``--run-id``: resume that run when the state dir holds it (a replaced orchestrator pod), else start it.
    resume_existing: bool = False
    run_id: str | None = None
    state_dir: Path = Path(".orchestrator")
    seed: int = 0
    outage_waits_s: tuple[float, ...] = (30.0, 90.0)
    lane_retries: int = Field(1, ge=0)
    health_interval_s: float = Field(2.0, gt=0)
    reprobe_interval_s: float = Field(30.0, gt=0)
    abort_after_all_quarantined_s: float = Field(300.0, ge=0)
    model_server: Literal["auto", "real", "scripted"] = "auto"  # scripted = the embedded offline model
    claude_bin: str | None = None
    #: Per-attempt judge timeout (None: JudgeConfig's default).
    judge_attempt_timeout_s: float | None = Field(None, gt=0)
    #: Build/execute/verify timing and events on the console (``run --verbose``).
    verbose: bool = False
    #: An external n8n-sandbox (or Daytona) for every lane instead of the embedded one; its key comes
    #: from N8N_SANDBOX_SERVICE_API_KEY.
    sandbox_url: str | None = None
    #: Set by the A/B runner: the scripted model route's tag for this run's lanes (``<base>/route/<tag>``).
    model_route_tag: str | None = None
    #: Set by the A/B runner: the orchestrator env var whose value is the lanes' model key (real route only).
    lane_model_key_env: str | None = None
    # -- the model gateway (issue 37): every model call of the run through one rate-aware proxy
    model_gateway: bool = True
    #: where it listens (0: any free port; in a pod 0.0.0.0 and a fixed port) and the URL lanes reach
    #: it at (default http://<host>:<port>; in a cluster its Service)
    model_gateway_host: str = "127.0.0.1"
    model_gateway_port: int = Field(0, ge=0, le=65535)
    model_gateway_url: str | None = None
    #: bounds of the build concurrency the gateway's rule sets when --concurrency is not given
    #: (default max: lanes × per-lane builds)
    concurrency_min: int = Field(1, ge=1)
    concurrency_max: int | None = Field(None, ge=1)
    #: how long new builds wait for a provider that is down before the run stops starting them
    provider_wait_s: float = Field(1200.0, gt=0)
    #: how long the gateway holds one call while the provider is down before answering 529
    gateway_hold_s: float = Field(30.0, ge=0)

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise _config_error(exc) from None

    @model_validator(mode="before")
    @classmethod
    def _file_plugin_options(cls, data: Any) -> Any:
        """A plug-in's option given as a keyword (``RunConfig(base_url=…)``, as the CLI and tests
        give them) goes into :attr:`plugin_options`; an unknown keyword stays, for pydantic to refuse."""
        if not isinstance(data, dict):
            return data
        known = set(cls.model_fields)
        moved = {k: v for k, v in data.items() if k not in known and k in plugin_option_names()}
        if not moved:
            return data
        rest = {k: v for k, v in data.items() if k not in moved}
        rest["plugin_options"] = {**dict(rest.get("plugin_options") or {}), **moved}
        return rest

    @field_validator("metrics_host")
    @classmethod
    def _ip_address(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                ipaddress.ip_address(value)
            except ValueError:
                raise ValueError("not an IP address") from None
        return value

    def replace(self, **changes: Any) -> RunConfig:
        """A copy with ``changes``, checked as the flags are (one-line :class:`ConfigError`): the
        config is frozen, so every later decision (a command's own flag, an A/B arm, ``resolve``) is a
        new config, never an edit of one another part of the run holds."""
        return type(self)(**(dict(self) | changes))

    @property
    def global_cap(self) -> int:
        """The fixed cap on concurrent builds: ``--concurrency``, else lanes × 2 (n8n's rule)."""
        return self.concurrency or self.lanes * 2

    @property
    def adaptive_concurrency(self) -> bool:
        """The gateway's rule sets the build concurrency (no fixed ``--concurrency`` was given)."""
        return self.model_gateway and self.concurrency is None

    @property
    def concurrency_bounds(self) -> tuple[int, int]:
        """(lowest, highest) cap the model gateway's rule may set: ``--concurrency-min`` and
        ``--concurrency-max``, by default lanes × ``--per-lane-builds`` (the low never above the high)."""
        high = self.concurrency_max or self.lanes * self.per_lane_builds
        return min(self.concurrency_min, high), high

    def public(self) -> dict[str, object]:
        """The config as recorded in eval-results.json (no password)."""
        data: dict[str, object] = self.model_dump(mode="json", exclude={"plugin_options"})
        secrets = secret_option_names()
        data["plugin_options"] = {k: (str(v) if isinstance(v, Path) else v) for k, v in self.plugin_options.items()
                                  if k not in secrets}
        return data
