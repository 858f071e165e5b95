"""``orchestrator ab``: one pipeline run per arm (model and/or lane env), then ``ab-report.md``.

``--plan BASELINE``: the builds an A/B needs for ``--effect`` at ``--power`` (``ab-plan.md``); alone
(no ``--arm``) it only plans, with arms it runs the plan's iterations. ``--sequential``: both arms
at once, stopping as soon as the mixture SPRT decides (:mod:`orchestrator.experiments.sequential`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console

from orchestrator.builders.builder import get_builder
from orchestrator.cli.common import run_async
from orchestrator.cli.run_options import run_options
from orchestrator.compare.load import load_results
from orchestrator.errors import ConfigError
from orchestrator.experiments.ab import (
    AB_BUILDER,
    Arm,
    check_arms_for_builder,
    check_mode,
    default_experiment,
    new_ab_id,
    parse_arms,
    resumed_root,
    run_arms,
    run_arms_sequential,
)
from orchestrator.experiments.ab_report import ArmData, write_ab_report
from orchestrator.experiments.plan import JSON_FILENAME as PLAN_JSON
from orchestrator.experiments.plan import MD_FILENAME as PLAN_MD
from orchestrator.experiments.plan import Plan, duration_text, make_plan, render_markdown
from orchestrator.experiments.sequential import SequentialDesign
from orchestrator.run.config import RunConfig
from orchestrator.run.resolve import preflight, resolve

if TYPE_CHECKING:
    from orchestrator.run.pipeline import RunHooks

console = Console(stderr=True)


def _hooks_for(cfg: RunConfig) -> list[RunHooks]:
    from orchestrator.experiments.langsmith_sync import default_hooks

    return default_hooks(cfg)


def _share(flag: str, value: float) -> float:
    if not 0 < value < 1:
        raise ConfigError(f"{flag}: must be between 0 and 1 (exclusive), got {value}")
    return value


def _write_plan(plan: Plan, root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / PLAN_JSON).write_text(json.dumps(plan.to_dict(), indent=2) + "\n", encoding="utf-8")
    md = root / PLAN_MD
    md.write_text(render_markdown(plan), encoding="utf-8")
    return md


def register(app: typer.Typer) -> None:
    @app.command("ab")
    @run_options(builder=AB_BUILDER)  # an arm's model drives n8n's own agent unless --builder says otherwise
    def ab_command(
        cfg: RunConfig,
        arm: list[str] = typer.Option([], "--arm", help="NAME=MODEL, e.g. control=anthropic/claude-sonnet-4-6 (≥ 2)."),
        arm_env: list[str] = typer.Option([], "--arm-env", help="ARM=KEY=VALUE lane env for one arm (repeatable)."),
        arm_model_url: list[str] = typer.Option(
            [], "--arm-model-url", help="ARM=URL: where that arm's lanes send model calls (N8N_INSTANCE_AI_MODEL_URL; "
                                        "required for custom/… models)."),
        arm_model_key_env: list[str] = typer.Option(
            [], "--arm-model-key-env", help="ARM=VAR: the env var holding that arm's model key (default: by the "
                                            "model's provider prefix, e.g. openai/ → OPENAI_API_KEY)."),
        mode: str = typer.Option("separate", help="separate (a lane pool per arm, arms in turn) or interleaved."),
        plan: Path | None = typer.Option(
            None, "--plan", help="Baseline eval-results.json to plan from: the iterations needed to detect --effect "
                                 "with --power, their cost and wall time on --lanes lanes (ab-plan.md). Without "
                                 "--arm: plan only; with arms: run the plan's iterations (an --iterations above 1 "
                                 "caps them)."),
        effect: float = typer.Option(0.10, "--effect", help="The difference in pass rate to detect (0.10 = 10 points)."),
        power: float = typer.Option(0.80, "--power", help="Power of the plan."),
        alpha: float = typer.Option(0.05, "--alpha", help="False-positive rate of the plan and the sequential test."),
        sequential: bool = typer.Option(
            False, "--sequential", help="Run both arms at once in matched order and stop as soon as a mixture SPRT on "
                                        "the discordant build pairs decides (or finds --effect futile); --iterations "
                                        "(or the plan's) is the most it runs."),
        beta: float = typer.Option(0.20, "--beta", help="--sequential: stop as futile once the likelihood ratio "
                                                        "falls to beta."),
        resume_existing: bool = typer.Option(
            False, "--resume-existing",
            help="With --run-id: resume each arm's run (ID-<arm>) the state dir holds (a replaced A/B pod: finished "
                 "units are kept, a sequential test goes on from the pairs it saw), start the others."),
    ) -> None:
        """Run the selection once per arm (own lanes, experiment and output folder), then write
        ab-report.md / ab-report.json: verdict pairs, exact McNemar and the paired difference with its
        95% interval per case and overall, what the comparison could detect, pass rates, cost."""
        _share("--effect", effect)
        _share("--power", power)
        _share("--alpha", alpha)
        _share("--beta", beta)
        if resume_existing and not cfg.run_id:
            raise ConfigError("--resume-existing: needs --run-id (the A/B whose arms to resume when their state exists)")
        planned: Plan | None = None
        if plan is not None:
            planned = make_plan(load_results(plan, role="--plan baseline"), effect=effect, power=power, alpha=alpha,
                                lanes=cfg.lanes)
            c = planned.chosen
            console.print(f"plan from {planned.baseline.run_id}: {c.effect:.0%} at {c.power:.0%} power → "
                          f"{c.pairs} build pairs, {c.iterations} iteration(s), {c.builds} builds, ${c.cost_usd:.2f}, "
                          f"{duration_text(c.wall_s)} on {planned.lanes} lane(s)")
            if not arm:
                md = _write_plan(planned, cfg.output_dir or Path("results") / new_ab_id())
                typer.echo(md.read_text(encoding="utf-8"))
                console.print(f"A/B plan: {md}")
                return
            if 1 < cfg.iterations < c.iterations:  # an explicit --iterations caps the plan
                console.print(f"[yellow]--iterations {cfg.iterations} caps the plan's {c.iterations}: the A/B will "
                              f"have less than {c.power:.0%} power for {c.effect:.0%}[/yellow]")
            else:
                cfg = cfg.replace(iterations=c.iterations)
        arms: list[Arm] = parse_arms(list(arm), list(arm_env), list(arm_model_url), list(arm_model_key_env))
        check_mode(mode)
        if sequential and len(arms) != 2:
            raise ConfigError(f"--sequential: compares exactly 2 arms (a control and a variant), got {len(arms)}")
        run_id, output_dir = cfg.run_id, cfg.output_dir
        # the arms share the base's checks (each arm is then resolved as its own run, with its own id)
        checked = resolve(cfg.replace(run_id=None, output_dir=None))
        run_async(preflight(checked))
        base = checked.config.replace(run_id=None, output_dir=None, resume_existing=resume_existing)
        check_arms_for_builder(arms, base.builder)
        ab_id = run_id or new_ab_id()
        resumed = resumed_root(base, arms, ab_id) if base.resume_existing else None
        root = resumed or output_dir or Path("results") / ab_id
        if resumed is not None:
            console.print(f"A/B {ab_id}: resuming its arms' runs; results stay in {resumed}")
        experiment = default_experiment(base)
        if planned is not None:
            _write_plan(planned, root)

        def announce(a: Arm, cfg: RunConfig) -> None:
            extra = f", env {', '.join(a.env)}" if a.env else ""
            extra += f", model URL {a.model_url}" if a.model_url else ""
            built_by = a.model if get_builder(cfg.builder).model_env else cfg.build_model  # the lanes' model builds
            console.print(f"[bold]arm {a.name}[/bold]: model {a.model}{extra}, builder {cfg.builder} "
                          f"(build model {built_by}) → {cfg.output_dir}")

        seq_report: dict[str, object] | None = None
        if sequential:
            # the cases are known once the arms plan; the cap is every case × every iteration
            design = SequentialDesign(effect=effect, alpha=alpha, beta=beta,
                                      discordance=planned.baseline.discordance if planned else None)
            console.print(f"sequential: {design.describe()}, at most {base.iterations} round(s)")
            done, seq = run_async(run_arms_sequential(base, arms, design, ab_id=ab_id, experiment_name=experiment,
                                                      output_root=root, hooks_for=_hooks_for, on_arm=announce))
            seq_report = seq.to_dict()
            console.print(f"sequential: [bold]{seq.state.decision.value if seq.state.decision else '—'}[/bold] after "
                          f"{seq.state.pairs} build pair(s); {seq.builds_run} of {seq.fixed_builds} builds run, "
                          f"{seq.builds_saved} saved ({seq.saved_share:.0%}, ~${seq.cost_saved_usd:.4f}), "
                          f"{duration_text(seq.wall_s)}")
        else:
            done = run_async(run_arms(base, arms, ab_id=ab_id, experiment_name=experiment, output_root=root,
                                      hooks_for=_hooks_for, on_arm=announce))
        data = [ArmData(r.arm.name, r.arm.model, r.arm.env, r.cfg.experiment_name, r.results, r.outcome.results_path)
                for r in done]
        failed = False
        for r in done:
            summary = r.results.summary
            if summary is not None:
                rate = f"{summary.pass_rate.rate:.0%}" if summary.pass_rate else "n/a"
                console.print(f"arm [bold]{r.arm.name}[/bold] ({r.outcome.run_id}): {summary.units_finished}/"
                              f"{summary.units_total} units, pass rate {rate} ({summary.passed_trials}/{summary.trials}"
                              f" trials), cost ${summary.build_cost_usd:.4f} → {r.outcome.results_path}")
            for failure in r.outcome.cleanup_failures:
                console.print(f"[red]arm {r.arm.name}: cleanup failed:[/red] {failure}")
            for error in r.outcome.errors:
                console.print(f"[red]arm {r.arm.name}: error:[/red] {error}")
            failed = failed or bool(r.outcome.errors or r.outcome.cleanup_failures)
        if len(data) < len(arms):
            console.print(f"[yellow]only {len(data)} of {len(arms)} arm(s) ran[/yellow]")
        if len(data) >= 2:
            md, js = write_ab_report(root, ab_id, "sequential" if sequential else mode, data, seq_report)
            console.print(f"A/B report: {md} ({js.name})")
        if failed or len(data) < len(arms):
            raise typer.Exit(1)
