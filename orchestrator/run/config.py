"""Everything one ``orchestrator run`` was asked to do, checked once at the edge.

``RunConfig`` is a pydantic model: field ranges and types are declared (``Field(ge=…)``), and a value
out of range is a one-line :class:`ConfigError` naming the flag (``--iterations: must be ≥ 1, got
0``), at construction and again in :meth:`RunConfig.validate` (the CLI assigns a few fields after
construction). What depends on several fields, or on the registries of backends and builders, is
checked in :meth:`RunConfig.validate`; which builder may run on which backend, and with
what, is :func:`~orchestrator.run.stack.resolve_stack`'s to say.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from orchestrator.builders.builder import DEFAULT_BUILDER
from orchestrator.errors import ConfigError
from orchestrator.lanes.backend import DEFAULT_BACKEND, available_backends, get_backend
from orchestrator.lanes.pool import make_spec, parse_base_urls
from orchestrator.lanes.profiles import resolve_env
from orchestrator.run.stack import builder_options, resolve_stack, select_builder
from orchestrator.verify.judge import JudgeConfig

DEFAULT_BUILD_MODEL = "claude-opus-4-8"
DEFAULT_BASELINE_PREFIX = "instance-ai-baseline-"


#: flags whose name is not ``--`` + the field name with dashes
_FLAG_OF = {"cases_paths": "CASES", "outage_waits_s": "--outage-waits"}
#: fields with no flag (set by tests, the A/B runner or a resumed run): named as they are
_NO_FLAG = {"build_max_retries", "judge_attempt_timeout_s", "lane_retries", "health_interval_s",
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
    model_config = ConfigDict(arbitrary_types_allowed=True)

    cases_paths: list[Path] = Field(default_factory=lambda: [Path("cases")])
    source: Literal["disk", "langtracer"] = "disk"
    suite: str | None = None
    filter: str | None = None
    exclude: str | None = None
    tier: str | None = None
    iterations: int = Field(1, ge=1)
    backend: str = DEFAULT_BACKEND
    builder: str = DEFAULT_BUILDER  # plug-ins by name (``--prebuilt-workflows`` selects its builder)
    lanes: int = Field(2, ge=1)
    base_url: str | None = None
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
    build_mcp_timeout_ms: int = Field(120_000, ge=1)
    mcp_server: str = "n8n-local"
    build_cwd: Path | None = None
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
    email: str | None = None
    password: str | None = Field(None, repr=False)
    outage_waits_s: tuple[float, ...] = (30.0, 90.0)
    lane_retries: int = Field(1, ge=0)
    health_interval_s: float = Field(2.0, gt=0)
    reprobe_interval_s: float = Field(30.0, gt=0)
    abort_after_all_quarantined_s: float = Field(300.0, ge=0)
    model_server: Literal["auto", "real", "scripted"] = "auto"  # scripted = the embedded offline model
    claude_bin: str | None = None
    #: CLAUDE_CODE_MAX_RETRIES for builds (None: the CLI's own default, ~10 retries over minutes).
    build_max_retries: int | None = Field(None, ge=0)
    #: Per-attempt judge timeout (None: JudgeConfig's default).
    judge_attempt_timeout_s: float | None = Field(None, gt=0)
    #: Score the workflows of this manifest (slug → workflow ids) instead of building (static lane).
    prebuilt_workflows: Path | None = None
    delete_prebuilt_workflows: bool = False
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

    @field_validator("metrics_host")
    @classmethod
    def _ip_address(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                ipaddress.ip_address(value)
            except ValueError:
                raise ValueError("not an IP address") from None
        return value

    def validate(self) -> RunConfig:  # type: ignore[override]  # (pydantic's deprecated classmethod)
        """Check every field again (the CLI sets a few after construction), then what spans several
        fields or the plug-in registries. Returns ``self``; raises a one-line :class:`ConfigError`."""
        try:
            type(self).model_validate(self.model_dump())
        except ValidationError as exc:
            raise _config_error(exc) from None
        if self.backend not in available_backends():
            raise ConfigError(f"--backend: unknown backend {self.backend!r}; choose one of {', '.join(available_backends())}")
        backend_cls = get_backend(self.backend)
        reached_by_url = not backend_cls.owns_lanes  # lanes someone else runs
        builder_cls = select_builder(self.builder, self)  # one line naming --builder when unknown
        self.builder = builder_cls.name
        if self.source == "langtracer" and not self.suite:
            raise ConfigError("--suite: required with --source langtracer")
        if self.source == "langtracer":  # the reference: a suite-scoped, eval-tagged name for both
            scoped = f"instance-ai-langtracer-{self.suite}"
            self.dataset = self.dataset or scoped
            if self.baseline_prefix == DEFAULT_BASELINE_PREFIX:
                self.baseline_prefix = scoped
        if reached_by_url and not self.base_url:
            raise ConfigError(f"--base-url: required with --backend {self.backend}")
        if self.build_cwd is not None and not self.build_cwd.is_dir():
            raise ConfigError(f"--build-cwd: {self.build_cwd} is not a directory")
        if self.baseline is not None and not self.baseline.is_file():
            raise ConfigError(f"--baseline: {self.baseline} is not a file")
        if self.durations_from is not None and not self.durations_from.is_file():
            raise ConfigError(f"--durations-from: {self.durations_from} is not a file")
        if self.concurrency_max is not None and self.concurrency_max < self.concurrency_min:
            raise ConfigError(f"--concurrency-max: {self.concurrency_max} is below --concurrency-min {self.concurrency_min}")
        if self.model_gateway_url is not None and not self.model_gateway_url.startswith(("http://", "https://")):
            raise ConfigError(f"--model-gateway-url: not an http(s) URL: {self.model_gateway_url!r}")
        if self.sandbox_url is not None and not self.sandbox_url.startswith(("http://", "https://")):
            raise ConfigError(f"--sandbox-url: not an http(s) URL: {self.sandbox_url!r}")
        # Checked here, before anything starts, so a typo fails in a second with one line.
        resolve_env(self.profile, self.env)  # --profile and --env
        builder_cls.check_config(builder_options(builder_cls, self))  # the builder's own flags, e.g. the manifest
        resolve_stack(builder_cls, backend_cls, self)  # the builder on the backend
        get_backend(self.backend).preflight(make_spec(self.profile, self.env))  # e.g. docker: the lane image
        JudgeConfig.from_env()  # N8N_INSTANCE_AI_EVAL_JUDGE_EFFORT
        if reached_by_url:
            urls = parse_base_urls(self.base_url)
            if self.lanes > len(urls):
                raise ConfigError(f"--lanes: {self.lanes} exceeds the {len(urls)} --base-url lane(s) given")
        return self

    @property
    def global_cap(self) -> int:
        return self.concurrency or self.lanes * 2

    @property
    def adaptive_concurrency(self) -> bool:
        """The gateway's rule sets the build concurrency (no fixed ``--concurrency`` was given)."""
        return self.model_gateway and self.concurrency is None

    @property
    def concurrency_bounds(self) -> tuple[int, int]:
        high = self.concurrency_max or self.lanes * self.per_lane_builds
        return min(self.concurrency_min, high), high

    def public(self) -> dict[str, object]:
        """The config as recorded in eval-results.json (no password)."""
        data: dict[str, object] = self.model_dump(mode="json", exclude={"password"})
        return data
