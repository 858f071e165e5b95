"""Everything one ``orchestrator run`` was asked to do, checked once at the edge."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

from orchestrator.build.builder import get_builder
from orchestrator.errors import ConfigError
from orchestrator.lanes.backend import available_backends
from orchestrator.lanes.profiles import resolve_env
from orchestrator.lanes.static import parse_base_urls
from orchestrator.verify.judge import JudgeConfig

DEFAULT_BUILD_MODEL = "claude-opus-4-8"


@dataclass
class RunConfig:
    cases_paths: list[Path] = field(default_factory=lambda: [Path("cases")])
    source: str = "disk"
    suite: str | None = None
    filter: str | None = None
    exclude: str | None = None
    tier: str | None = None
    iterations: int = 1
    backend: str = "process"
    builder: str = "mcp"  # mcp (claude -p over the lane's MCP server); plug-ins by name
    lanes: int = 2
    base_url: str | None = None
    profile: str = "eval"
    env: list[str] = field(default_factory=list)
    concurrency: int | None = None  # default lanes × 2
    per_lane_builds: int = 4
    timeout_ms: int = 900_000  # per unit (build + verify); complex cases get 1.5×
    build_timeout_ms: int = 1_800_000
    build_max_attempts: int = 3
    build_mcp_timeout_ms: int = 120_000
    mcp_server: str = "n8n-local"
    build_cwd: Path | None = None
    build_model: str = field(default_factory=lambda: os.environ.get("ANTHROPIC_MODEL") or DEFAULT_BUILD_MODEL)
    output_dir: Path | None = None
    keep_workflows: bool = False
    experiment_name: str | None = None
    dataset: str | None = None
    baseline: Path | None = None
    baseline_prefix: str = "instance-ai-baseline-"
    #: History for longest-expected-first (None: orchestrator.allocator.durations.default_durations_source).
    durations_from: Path | None = None
    max_cost_usd: float | None = None
    metrics_port: int | None = None
    pushgateway: str | None = None
    resume: str | None = None
    run_id: str | None = None
    state_dir: Path = Path(".orchestrator")
    seed: int = 0
    email: str | None = None
    password: str | None = field(default=None, repr=False)
    outage_waits_s: tuple[float, ...] = (30.0, 90.0)
    lane_retries: int = 1
    health_interval_s: float = 2.0
    reprobe_interval_s: float = 30.0
    abort_after_all_quarantined_s: float = 300.0
    model_server: str = "auto"  # auto | real | scripted: scripted = the embedded offline model
    claude_bin: str | None = None
    #: CLAUDE_CODE_MAX_RETRIES for builds (None: the CLI's own default, ~10 retries over minutes).
    build_max_retries: int | None = None
    #: Per-attempt judge timeout (None: JudgeConfig's default).
    judge_attempt_timeout_s: float | None = None

    def validate(self) -> "RunConfig":
        if self.backend not in available_backends():
            raise ConfigError(f"--backend: unknown backend {self.backend!r}; choose one of {', '.join(available_backends())}")
        self.builder = get_builder(self.builder).name  # one line naming --builder when unknown
        if self.source not in ("disk", "langtracer"):
            raise ConfigError(f"--source: must be disk or langtracer, got {self.source!r}")
        if self.source == "langtracer" and not self.suite:
            raise ConfigError("--suite: required with --source langtracer")
        for flag, value, low in (
            ("--iterations", self.iterations, 1),
            ("--lanes", self.lanes, 1),
            ("--per-lane-builds", self.per_lane_builds, 1),
            ("--build-max-attempts", self.build_max_attempts, 1),
            ("--timeout-ms", self.timeout_ms, 1),
            ("--build-timeout-ms", self.build_timeout_ms, 0),
            ("--build-mcp-timeout-ms", self.build_mcp_timeout_ms, 1),
        ):
            if value < low:
                raise ConfigError(f"{flag}: must be ≥ {low}, got {value}")
        if self.concurrency is not None and self.concurrency < 1:
            raise ConfigError(f"--concurrency: must be ≥ 1, got {self.concurrency}")
        if self.max_cost_usd is not None and self.max_cost_usd <= 0:
            raise ConfigError(f"--max-cost-usd: must be > 0, got {self.max_cost_usd}")
        if self.metrics_port is not None and not (0 <= self.metrics_port <= 65535):
            raise ConfigError(f"--metrics-port: must be 0–65535, got {self.metrics_port}")
        if self.model_server not in ("auto", "real", "scripted"):
            raise ConfigError(f"--model-server: must be auto, real or scripted, got {self.model_server!r}")
        if self.backend == "static" and not self.base_url:
            raise ConfigError("--base-url: required with --backend static")
        if self.build_cwd is not None and not self.build_cwd.is_dir():
            raise ConfigError(f"--build-cwd: {self.build_cwd} is not a directory")
        if self.baseline is not None and not self.baseline.is_file():
            raise ConfigError(f"--baseline: {self.baseline} is not a file")
        if self.durations_from is not None and not self.durations_from.is_file():
            raise ConfigError(f"--durations-from: {self.durations_from} is not a file")
        if self.build_max_retries is not None and self.build_max_retries < 0:
            raise ConfigError(f"build_max_retries: must be ≥ 0, got {self.build_max_retries}")
        if self.judge_attempt_timeout_s is not None and self.judge_attempt_timeout_s <= 0:
            raise ConfigError(f"judge_attempt_timeout_s: must be > 0, got {self.judge_attempt_timeout_s}")
        # Checked here, before anything starts, so a typo fails in a second with one line.
        resolve_env(self.profile, self.env)  # --profile and --env
        JudgeConfig.from_env()  # N8N_INSTANCE_AI_EVAL_JUDGE_EFFORT
        if self.backend == "static":
            try:
                urls = parse_base_urls(self.base_url)
            except httpx.InvalidURL as exc:  # e.g. a control character pasted into the flag
                raise ConfigError(f"--base-url: {exc}") from None
            if self.lanes > len(urls):
                raise ConfigError(f"--lanes: {self.lanes} exceeds the {len(urls)} --base-url lane(s) given")
        return self

    @property
    def global_cap(self) -> int:
        return self.concurrency or self.lanes * 2

    def public(self) -> dict[str, object]:
        """The config as recorded in eval-results.json (no password)."""
        data = asdict(self)
        data.pop("password", None)
        return {k: (str(v) if isinstance(v, Path) else [str(p) for p in v] if k == "cases_paths" else v) for k, v in data.items()}
