"""The options ``orchestrator run`` and ``orchestrator ab`` share, declared once.

Typer builds a command's options from its function signature, so :func:`run_options` gives a
command the shared ones by writing them into the wrapper's ``__signature__``; the command itself
receives them as one ``RunConfig`` (not yet validated) plus its own extra arguments.
"""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional, overload

import typer

from orchestrator.builders.budgets import DEFAULT_TURN_BUDGET_MS
from orchestrator.builders.builder import ALIASES, BUILD_VIA_MCP, DEFAULT_BUILDER, Builder, available_builders
from orchestrator.cli.plugin_params import parameter
from orchestrator.errors import ConfigError
from orchestrator.lanes.backend import DEFAULT_BACKEND, available_backends
from orchestrator.ledger import default_state_dir
from orchestrator.plugin_flags import plugin_flags
from orchestrator.run.config import RunConfig

P = inspect.Parameter


def _opt(name: str, annotation: Any, default: Any, help: str, *decls: str, **kw: Any) -> P:
    return P(name, P.KEYWORD_ONLY, annotation=annotation, default=typer.Option(default, *decls, help=help, **kw))


SHARED: list[P] = [
    P("cases", P.KEYWORD_ONLY, annotation=Optional[list[Path]],
      default=typer.Argument(None, help="Case files or directories (default: cases/).")),
    _opt("source", str, "disk", "disk or langtracer."),
    _opt("suite", Optional[str], None, "LangTracer suite (with --source langtracer)."),
    _opt("filter", Optional[str], None, "Comma-separated slug substrings (OR).", "--filter"),
    _opt("exclude", Optional[str], None, "Comma-separated slug substrings to skip."),
    _opt("tier", Optional[str], None, "Only cases whose datasets contain this value."),
    _opt("iterations", int, 1, "Fresh builds per case (pass@k / pass^k)."),
    _opt("backend", str, DEFAULT_BACKEND, f"Lane backend: {', '.join(available_backends())}."),
    _opt("builder", str, DEFAULT_BUILDER, f"Builder: {', '.join(available_builders())} (README: Builders; "
         "which backend each needs is checked before anything starts)."),
    _opt("build_via_mcp", bool, False, "The reference harness's flag: the same as --builder mcp.", "--build-via-mcp"),
    _opt("sandbox_url", Optional[str], None, "External n8n-sandbox for every lane (key: N8N_SANDBOX_SERVICE_API_KEY)."),
    _opt("lanes", int, 2, "Lanes to bring up (lanes someone else runs: how many of their URLs to use)."),
    _opt("profile", str, "eval", "Env profile from lanes/profiles/."),
    _opt("env", list[str], [], "KEY=VALUE for every lane (repeatable).", "--env"),
    _opt("concurrency", Optional[int], None, "A fixed global cap on concurrent builds (default: the model "
         "gateway sets it from the provider's pushback, starting at lanes × 2; lanes × 2 without the gateway)."),
    _opt("concurrency_min", int, 1, "Lowest global cap the model gateway's rule may set."),
    _opt("concurrency_max", Optional[int], None, "Highest global cap the model gateway's rule may set "
         "(default lanes × --per-lane-builds)."),
    _opt("per_lane_builds", int, 4, "Cap on concurrent builds per lane."),
    _opt("model_gateway", bool, True, "Every model call (lanes, claude, judge, user proxy) through the run's "
         "model gateway: rate-aware, outage-aware, cost per unit and stage.", "--model-gateway/--no-model-gateway"),
    _opt("model_gateway_host", str, "127.0.0.1", "Address the model gateway listens on (0.0.0.0 in a pod)."),
    _opt("model_gateway_port", int, 0, "Port of the model gateway (0: any free port)."),
    _opt("model_gateway_url", Optional[str], None, "URL lanes reach the model gateway at (default: its own "
         "address; in a cluster its Service)."),
    _opt("provider_wait_s", float, 1200.0, "How long new builds wait for a model provider that is down before "
         "the run stops starting them."),
    _opt("timeout_ms", int, 900_000, "Verification budget per unit: each execution scenario (complex cases × 1.5). "
         "Does not bound the build (see --build-timeout-ms)."),
    _opt("build_timeout_ms", Optional[int], None, "Build budget, for every builder: mcp/remote, the wall clock per "
         f"claude attempt (default {Builder.default_build_timeout_ms}); instance-ai, each user turn (default "
         f"{DEFAULT_TURN_BUDGET_MS}; the conversation gets 2×, 240 s of silence ends a run). Complex cases × 1.5. "
         "0 disables."),
    _opt("build_max_attempts", int, 3, "Attempts per unit when claude prints no workflow id."),
    _opt("output_dir", Optional[Path], None, "Where results go (default results/<run-id>)."),
    _opt("keep_workflows", bool, False, "Keep built workflows and build users."),
    _opt("judge_mcp_process", bool, False, "Also judge process expectations of MCP builds (an extra, reported "
         "but never scored: n8n skips them)."),
    _opt("experiment_name", Optional[str], None, "Experiment name (LangSmith)."),
    _opt("dataset", Optional[str], None, "LangSmith dataset."),
    _opt("sync_dataset", bool, False, "Write the selected cases into the LangSmith dataset (default: only read it)."),
    _opt("baseline", Optional[Path], None, "A baseline eval-results.json to compare against."),
    _opt("baseline_prefix", str, "instance-ai-baseline-", "LangSmith baseline experiment prefix."),
    _opt("durations_from", Optional[Path], None,
         "An earlier eval-results.json whose unit times order the queue, longest first "
         "(default: the baseline, else the newest finished run in the state dir)."),
    _opt("max_cost_usd", Optional[float], None, "Stop starting builds once this much was spent."),
    _opt("metrics_port", Optional[int], None, "Serve Prometheus /metrics on --metrics-host:PORT."),
    _opt("metrics_host", Optional[str], None, "Address /metrics listens on (default 127.0.0.1; 0.0.0.0 in a pod).",
         envvar="ORCHESTRATOR_METRICS_HOST"),
    _opt("pushgateway", Optional[str], None, "Push metrics to this Pushgateway at the end."),
    _opt("run_id", Optional[str], None, "Run id (default: a new one)."),
    _opt("state_dir", Path, default_state_dir(), "Where ledgers and unit logs live."),
    _opt("seed", int, 0, "Allocator seed (deterministic schedule)."),
    _opt("model_server", str, "auto", "auto (real if ANTHROPIC_API_KEY is set), real, or scripted (embedded offline model)."),
    _opt("outage_waits", str, "30,90", "Seconds to wait before each provider-outage retry."),
]


#: the plug-ins' own flags (``orchestrator.plugin_flags``), after the shared ones
PLUGIN_FLAGS = [parameter(f) for f in plugin_flags().values()]
_NAMES = {p.name for p in SHARED} | {p.name for p in PLUGIN_FLAGS}


def _builder(values: dict[str, Any], default_builder: str) -> None:
    """``--build-via-mcp`` (the reference harness's flag) is ``--builder mcp``; combined with another
    explicit builder it is a contradiction, refused rather than silently resolved."""
    if not values.pop("build_via_mcp", False):
        return
    builder = str(values.get("builder") or default_builder)
    if builder != default_builder and ALIASES.get(builder, builder) != BUILD_VIA_MCP:
        raise ConfigError(f"--build-via-mcp means --builder {BUILD_VIA_MCP}: it cannot be combined with --builder {builder}")
    values["builder"] = BUILD_VIA_MCP


def _config(values: dict[str, Any], default_builder: str = DEFAULT_BUILDER) -> RunConfig:
    _builder(values, default_builder)
    waits_text = values.pop("outage_waits")
    try:
        waits = tuple(float(w) for w in waits_text.split(",") if w.strip())
    except ValueError:
        raise ConfigError(f"--outage-waits: expected comma-separated seconds, got {waits_text!r}") from None
    cases = values.pop("cases")
    values["env"] = list(values["env"])
    flags = plugin_flags()
    given = {k: values.pop(k) for k in list(values) if k in flags}
    plugin_options = {k: v for k, v in given.items() if v is not None and v != flags[k].default}
    return RunConfig(cases_paths=list(cases) if cases else [Path("cases")], outage_waits_s=waits,
                     plugin_options=plugin_options, **values)


@overload
def run_options(command: Callable[..., None], /, **defaults: Any) -> Callable[..., None]: ...


@overload
def run_options(command: None = None, /, **defaults: Any) -> Callable[[Callable[..., None]], Callable[..., None]]: ...


def run_options(
    command: Callable[..., None] | None = None, /, **defaults: Any
) -> Callable[..., None] | Callable[[Callable[..., None]], Callable[..., None]]:
    """Give ``command(cfg, **own)`` the shared options; ``own`` are its other keyword parameters.

    ``@run_options(builder="instance-ai")`` changes a shared option's default for this command only
    (``orchestrator ab`` builds with n8n's own agent unless ``--builder`` says otherwise)."""
    if command is None:
        return lambda cmd: _with_shared(cmd, defaults)
    return _with_shared(command, defaults)


def _shared(defaults: dict[str, Any]) -> list[P]:
    unknown = set(defaults) - _NAMES
    if unknown:
        raise TypeError(f"run_options: no shared option(s) {sorted(unknown)}")
    out = []
    for p in [*SHARED, *PLUGIN_FLAGS]:
        if p.name in defaults:
            info = copy.copy(p.default)
            info.default = defaults[p.name]
            p = p.replace(default=info)
        out.append(p)
    return out


def _with_shared(command: Callable[..., None], defaults: dict[str, Any]) -> Callable[..., None]:
    own = [p.replace(kind=P.KEYWORD_ONLY) for name, p in inspect.signature(command).parameters.items() if name != "cfg"]
    shared = _shared(defaults)

    @functools.wraps(command)
    def wrapper(**kwargs: Any) -> None:
        shared = {k: v for k, v in kwargs.items() if k in _NAMES}
        rest = {k: v for k, v in kwargs.items() if k not in _NAMES}
        command(_config(shared, defaults.get("builder", DEFAULT_BUILDER)), **rest)

    params = [shared[0], *own, *shared[1:]]  # the CASES argument first, then the command's own options
    wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    del wrapper.__wrapped__  # typer must read the signature above, not the command's
    return wrapper
