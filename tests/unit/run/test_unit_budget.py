"""One budget per stage: ``--build-timeout-ms`` bounds the build for every builder,
``--timeout-ms`` the verification; each is named so in ``--help``, in ``RunConfig`` and the README."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from support.stand_ins import UnusedBuilder, unused_judge
from typer.testing import CliRunner

from orchestrator.builders.builder import BuilderSettings, BuildRequest, available_builders, get_builder
from orchestrator.builders.claude.mcp import McpBuilder
from orchestrator.builders.claude.remote import DEADLINE_MARGIN_S, RemoteBuilder
from orchestrator.builders.claude.runner import AttemptResult, ClaudeConfig, EventSink
from orchestrator.builders.lane import BuildLane
from orchestrator.cases import EvalCase
from orchestrator.cli.main import app
from orchestrator.domain import BuildStatus
from orchestrator.run.config import RunConfig
from orchestrator.run.resolve import resolve
from orchestrator.run.unit import UnitRunner, UnitSettings

README = Path(__file__).resolve().parents[3] / "README.md"


def _help(*args: str) -> str:
    result = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", result.output).split())


def test_help_names_each_budget_by_its_stage() -> None:
    for command in ("run", "ab"):
        text = _help(command)
        assert "--timeout-ms" in text and "Verification budget per unit" in text
        assert "Does not bound the build" in text
        assert "--build-timeout-ms" in text and "Build budget, for every builder" in text
    readme = " ".join(README.read_text().split())
    assert "`--build-timeout-ms` bounds the build for every builder" in readme
    assert "`--timeout-ms` the verification" in readme
    assert "verification budget per unit" in (RunConfig.model_fields["timeout_ms"].description or
                                               _field_comment("timeout_ms"))
    assert "the build budget, for every builder" in _field_comment("build_timeout_ms")


def _field_comment(name: str) -> str:
    """The ``#:`` comment above a RunConfig field (its documentation in the code)."""
    src = (Path(__file__).resolve().parents[3] / "orchestrator" / "run" / "config.py").read_text().splitlines()
    at = next(i for i, line in enumerate(src) if line.strip().startswith(f"{name}:"))
    lines: list[str] = []
    for line in reversed(src[:at]):
        if not line.strip().startswith("#:"):
            break
        lines.insert(0, line.strip()[2:].strip())
    return " ".join(lines)


def test_the_build_budget_defaults_per_builder_and_is_never_the_verification_budget() -> None:
    """The default ``--build-timeout-ms`` is the reference's per builder: n8n ``harness/build-workflow.ts``
    ``DEFAULT_TIMEOUT_MS`` (900 s per user turn) for ``instance-ai``, n8n's ``--build-timeout-ms``
    default (1800 s per claude attempt) for ``mcp``; ``--timeout-ms`` changes neither."""
    def budget(builder: str, **flags: Any) -> int:
        return resolve(RunConfig(timeout_ms=5_000, builder=builder, **flags)).build_timeout_ms

    assert budget("instance-ai") == 900_000
    assert budget("mcp") == 1_800_000
    assert budget("instance-ai", build_timeout_ms=42_000) == budget("mcp", build_timeout_ms=42_000) == 42_000


def test_a_unit_gets_the_build_budget_for_its_build_and_the_verification_budget_for_verifying() -> None:
    """n8n ``harness/cleanup.ts`` ``effectiveTimeoutMs``: ``complex`` cases get 1.5× the base
    budget (build turn and scenario execution alike), simple and medium cases the base."""
    runner: Any = UnitRunner({}, {}, UnusedBuilder(), unused_judge(),
                             UnitSettings(max_attempts=1, timeout_ms=100_000, keep_workflows=False,
                                          build_timeout_ms=400_000))

    def case(complexity: str) -> EvalCase:
        return EvalCase.model_validate({"conversation": [{"role": "user", "text": "Build it"}],
                                        "complexity": complexity, "tags": ["t"], "outcomeExpectations": ["x"]})

    assert (runner._build_timeout_ms(case("medium")), runner._timeout_ms(case("medium"))) == (400_000, 100_000)
    assert (runner._build_timeout_ms(case("complex")), runner._timeout_ms(case("complex"))) == (600_000, 150_000)


# ------------------------------------------------------------------------------------------------
# issue 38: each builder's default budget is defined once, and every builder reads the scaled one

PACKAGE = Path(__file__).resolve().parents[3] / "orchestrator"
#: classes whose ``timeout_ms`` field is a build budget (a claude attempt's, a build request's)
BUDGET_CLASSES = {"ClaudeConfig", "BuildRequest", "BuilderSettings", "UnitSettings"}


def _ints(node: ast.AST) -> list[int]:
    """Every number a node spells: int constants, and digit runs inside its strings (help texts);
    not a pydantic bound (``Field(None, ge=0)``)."""
    bounds = {id(kw.value) for sub in ast.walk(node) if isinstance(sub, ast.Call)
              for kw in sub.keywords if kw.arg in ("ge", "gt", "le", "lt")}
    found: list[int] = []
    for sub in ast.walk(node):
        if id(sub) in bounds:
            continue
        if isinstance(sub, ast.Constant) and type(sub.value) is int:
            found.append(sub.value)
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            found += [int(d.replace("_", "")) for d in re.findall(r"\d[\d_]{3,}", sub.value)]
    return found


class _Bindings(ast.NodeVisitor):
    """Where the package gives a build budget a number: ``*build_timeout_ms`` targets, keywords,
    parameters and CLI options, the ``timeout_ms`` of :data:`BUDGET_CLASSES`, and the constants a
    ``default_build_timeout_ms`` names."""

    def __init__(self, where: str, constants: set[str]) -> None:
        self.where, self.constants = where, constants
        self.classes: list[str] = []
        self.found: list[tuple[str, str, int]] = []  # (where, name, value)
        self.named: set[str] = set()  # constants a default_build_timeout_ms refers to

    def _budget(self, name: str) -> bool:
        return ("build_timeout_ms" in name or name in self.constants
                or (name == "timeout_ms" and bool(self.classes) and self.classes[-1] in BUDGET_CLASSES))

    def _bind(self, name: str, value: ast.AST | None, line: int) -> None:
        if value is None:
            return
        if name == "default_build_timeout_ms" and isinstance(value, ast.Name):
            self.named.add(value.id)
        if self._budget(name):
            self.found += [(f"{self.where}:{line}", name, v) for v in _ints(value)]

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.classes.append(node.name)
        self.generic_visit(node)
        self.classes.pop()

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            if isinstance(target, (ast.Name, ast.Attribute)):
                self._bind(target.id if isinstance(target, ast.Name) else target.attr, node.value, node.lineno)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if isinstance(node.target, (ast.Name, ast.Attribute)):
            name = node.target.id if isinstance(node.target, ast.Name) else node.target.attr
            self._bind(name, node.value, node.lineno)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        for kw in node.keywords:
            if kw.arg is not None:
                self._bind(kw.arg, kw.value, node.lineno)
        if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            self._bind(node.args[0].value, ast.Tuple(elts=node.args[1:], ctx=ast.Load()), node.lineno)  # _opt(...)
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        args = node.args
        positional = args.posonlyargs + args.args
        for arg, default in zip(positional[len(positional) - len(args.defaults):], args.defaults, strict=True):
            self._bind(arg.arg, default, node.lineno)
        for arg, kw_default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
            self._bind(arg.arg, kw_default, node.lineno)
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]


def _budget_bindings() -> list[tuple[str, str, int]]:
    trees = {str(p.relative_to(PACKAGE.parent)): ast.parse(p.read_text()) for p in sorted(PACKAGE.rglob("*.py"))}
    constants: set[str] = set()
    for where, tree in trees.items():  # first: which constants the builders' defaults name
        first = _Bindings(where, set())
        first.visit(tree)
        constants |= first.named
    found: list[tuple[str, str, int]] = []
    for where, tree in trees.items():
        visitor = _Bindings(where, constants)
        visitor.visit(tree)
        found += visitor.found
    return found


def test_each_builders_default_build_budget_is_defined_once_in_the_package() -> None:
    """Issue 38 ("resolve once"): a builder's default ``--build-timeout-ms`` is its class's
    ``default_build_timeout_ms`` (or the one module constant it names), and no other build budget in
    the package — no settings default, no claude config default, no help text — spells a number of
    its own: each default literal is found exactly once, and nothing else is."""
    from orchestrator.harnesses.routing.trial import RoutingTrialBuilder

    builders = [get_builder(name) for name in available_builders()] + [RoutingTrialBuilder]
    defaults = {cls.default_build_timeout_ms for cls in builders}
    assert {1_800_000, 900_000} <= defaults  # mcp/remote (n8n's --build-timeout-ms), instance-ai (per turn)
    found = _budget_bindings()
    assert found, "the scan sees the package's budgets"
    stray = [(where, name, value) for where, name, value in found if value not in defaults]
    assert stray == [], f"a build budget with a literal of its own: {stray}"
    for value in sorted(defaults):
        sites = [(where, name) for where, name, v in found if v == value]
        assert len(sites) == 1, f"{value} is defined {len(sites)} times: {sites}"


FAKE_CLAUDE = """#!/bin/sh
# a claude that starts, says so, and never answers: only the attempt's budget ends it
echo "started $$" >> "$FAKE_CLAUDE_LOG"
exec sleep 120
"""


def _case(complexity: str) -> EvalCase:
    return EvalCase.model_validate({"conversation": [{"role": "user", "text": "Build it"}],
                                    "complexity": complexity, "tags": ["t"], "outcomeExpectations": ["x"]})


async def test_a_complex_cases_claude_attempt_runs_under_one_and_a_half_budgets(tmp_path: Path) -> None:
    """n8n ``harness/cleanup.ts`` ``effectiveTimeoutMs``: a ``complex`` case gets 1.5× the base
    budget. The run resolves ``--build-timeout-ms`` once, the unit scales it once, and the ``mcp``
    builder's claude attempt runs under the scaled budget — not the run's plain one: a claude that
    never answers is killed no sooner than 1.5 budgets after it started."""
    claude = tmp_path / "claude"
    claude.write_text(FAKE_CLAUDE)
    claude.chmod(0o700)
    log_path = tmp_path / "claude.log"
    (tmp_path / "builds").mkdir(mode=0o700)  # the run makes it (run/pipeline.py)
    base_ms = 1_000
    budget = resolve(RunConfig(build_timeout_ms=base_ms, builder=McpBuilder.name)).build_timeout_ms
    settings = UnitSettings(max_attempts=1, timeout_ms=100_000, build_timeout_ms=budget, keep_workflows=False)
    unit: Any = UnitRunner({}, {}, UnusedBuilder(), unused_judge(), settings)
    case = _case("complex")
    seen: list[int] = []

    class Recording(McpBuilder):
        async def run_attempt(self, prompt: str, lane: BuildLane, mcp_key: str, claude: ClaudeConfig,
                              on_event: EventSink) -> AttemptResult:
            seen.append(claude.timeout_ms)
            return await super().run_attempt(prompt, lane, mcp_key, claude, on_event)

    builder = Recording(BuilderSettings(run_id="budget-38", run_dir=tmp_path, model="scripted", claude_bin=claude,
                                        outage_waits_s=(), extra_env={"FAKE_CLAUDE_LOG": str(log_path)}))
    lane: Any = SimpleNamespace(lane=SimpleNamespace(base_url="http://127.0.0.1:9"))
    user: Any = SimpleNamespace(mcp_key="mcp-key-budget-38-0001", session=None)
    request = BuildRequest(case=case, iteration=0, attempt=0, timeout_ms=unit._build_timeout_ms(case))
    result = await builder.build(request, lane, user)
    assert seen == [1_500] == [request.timeout_ms]
    assert log_path.read_text().startswith("started"), "the fake claude ran"
    assert result.status == BuildStatus.timeout and result.attempts == 1
    assert result.duration_s >= 1.5  # not before the scaled budget; the status and the error say it ended it
    assert result.error == "build timed out after 2 s"  # 1.5 s, rounded


async def test_the_remote_builder_sends_the_requests_scaled_budget_to_its_runner(tmp_path: Path) -> None:
    """n8n ``harness/cleanup.ts`` ``effectiveTimeoutMs`` (complex × 1.5), for the ``remote``
    builder: the runner is asked to bound claude by the request's budget, and the orchestrator's
    deadline follows it."""
    sent: list[dict[str, Any]] = []

    class Runner:
        async def run(self, build_id: str, prompt: str, mcp_key: str, **options: Any) -> AttemptResult:
            sent.append(options)
            return AttemptResult("wf-1", 0.0, 1, 0.1, 0, False, False, None, None, "WORKFLOW_ID=wf-1")

    class Remote(RemoteBuilder):
        def runner_for(self, lane: BuildLane) -> Any:
            return Runner()

    builder = Remote(BuilderSettings(run_id="budget-38", run_dir=tmp_path, model="scripted", outage_waits_s=()))
    lane: Any = SimpleNamespace(lane=SimpleNamespace(base_url="http://127.0.0.1:9"))
    user: Any = SimpleNamespace(mcp_key="mcp-key-budget-38-0002", session=None)
    unit: Any = UnitRunner({}, {}, UnusedBuilder(), unused_judge(), UnitSettings(max_attempts=1, timeout_ms=1, keep_workflows=False,
                                                            build_timeout_ms=200_000))
    for complexity, expected in (("complex", 300_000), ("medium", 200_000)):
        sent.clear()
        case = _case(complexity)
        result = await builder.build(BuildRequest(case, 0, 0, unit._build_timeout_ms(case)), lane, user)
        assert result.status == BuildStatus.ok and result.workflow_id == "wf-1"
        assert [o["timeout_ms"] for o in sent] == [expected]
        assert [o["deadline_s"] for o in sent] == [expected / 1000 + DEADLINE_MARGIN_S]
