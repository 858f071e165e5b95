"""``orchestrator routing`` (also ``discovery``): the seed's ``eval:discovery`` routing mode on the lanes."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from orchestrator.cli.common import positive, run_async
from orchestrator.cli.harness_common import console, console_hooks, end_of_run
from orchestrator.cli.run_options import run_options
from orchestrator.errors import ConfigError
from orchestrator.harnesses import CHAT_BUILDER
from orchestrator.run.config import RunConfig
from orchestrator.run.resolve import resolve


def register(app: typer.Typer) -> None:
    @run_options(builder=CHAT_BUILDER, iterations=3, timeout_ms=60_000)
    def routing(
        cfg: RunConfig,
        cases_dir: Optional[Path] = typer.Option(None, "--cases-dir", help="Folder of route-*.json cases "
                                                 "(default cases/routing/; CASES works too)."),
        trials: Optional[int] = typer.Option(None, "--trials", help="Trials per case (the same as --iterations; "
                                                                    "default 3)."),
        timeout: Optional[int] = typer.Option(None, "--timeout", help="Per-trial budget in ms (the same as "
                                                                      "--timeout-ms; default 60000)."),
        fail_on_zero_pass: bool = typer.Option(False, "--fail-on-zero-pass",
                                               help="Exit 1 when a case has no passing trial (else: always 0)."),
        stop_on_route: bool = typer.Option(False, "--stop-on-route", help="End each trial at its first committing "
                                           "call (the judge then picks the route from the trace so far)."),
        json_out: Optional[Path] = typer.Option(None, "--json-out", help="Where routing-results.json goes "
                                                "(default --output-dir)."),
        variant: str = typer.Option("baseline", "--variant", help="Label written into the results."),
        exclude_prefix: Optional[str] = typer.Option(None, "--exclude-prefix",
                                                     help="Drop cases whose id starts with a comma-separated prefix."),
        validate_only: bool = typer.Option(False, "--validate-only", help="Validate the cases and exit."),
        save_cases_dir: Optional[Path] = typer.Option(None, "--save-cases-dir",
                                                      help="Write the loaded cases there, one <id>.json each."),
        verbose: bool = typer.Option(False, "--verbose", "-v", help="Every trial: its route, evidence, judge "
                                                                    "reason and the orchestrator's tool calls."),
    ) -> None:
        """Which route the lanes' Instance AI agent takes (build an Agent, a workflow, do it once,
        debug, answer, ask, do many, decline): each trial on a real lane, a judge stopping it once the
        route is decided. Writes eval-results.json, routing-results.json and routing-summary.md."""
        import json

        from orchestrator.cases import CaseLoadError, load_selected
        from orchestrator.harnesses.routing.cases import DEFAULT_CASES, load_routing_files, routing_cases

        if cfg.builder != CHAT_BUILDER:
            raise ConfigError(f"--builder {cfg.builder}: routing trials watch the lanes' own agent ({CHAT_BUILDER})")
        if trials is not None:
            cfg = cfg.replace(iterations=positive(trials, "--trials") or cfg.iterations)
        cfg = cfg.replace(build_timeout_ms=positive(timeout, "--timeout") or cfg.build_timeout_ms or cfg.timeout_ms)
        if cfg.source == "langtracer":
            loaded = [c for c in run_async(load_selected(cfg.source, None, cfg.suite, None, None, None))
                      if "routing" in c.case.tags]
        else:
            paths = [cases_dir] if cases_dir else (cfg.cases_paths if cfg.cases_paths != [Path("cases")] else [DEFAULT_CASES])
            loaded, issues = load_routing_files(list(paths))
            if issues:
                raise CaseLoadError(issues)
        prefixes = [p.strip() for p in (exclude_prefix or "").split(",") if p.strip()]
        loaded = [c for c in loaded if not any(c.slug.startswith(p) for p in prefixes)]
        cases, skipped = routing_cases(loaded)
        if skipped:
            console.print(f"skipping {len(skipped)} case(s) that need the credential-setup browser: {', '.join(skipped)}")
        if save_cases_dir is not None:
            save_cases_dir.mkdir(parents=True, exist_ok=True)
            for c in cases:
                (save_cases_dir / f"{c.id}.json").write_text(json.dumps(c.case.to_json(), indent=2) + "\n")
        if validate_only:
            console.print(f"{len(cases)} routing case(s) valid")
            return
        from orchestrator.harnesses.common import run_stages
        from orchestrator.harnesses.routing.harness import RoutingSettings, bucket_rates, outcomes, routing_stages
        from orchestrator.ids import new_run_id

        run_id = cfg.run_id or new_run_id()
        out = cfg.output_dir or Path("results") / "routing" / run_id
        cfg = resolve(cfg.replace(verbose=verbose, run_id=run_id, output_dir=out)).config  # a flag error: now
        settings = RoutingSettings(cases, out, json_out, variant, stop_on_route,
                                   model=next((e.split("=", 1)[1] for e in cfg.env if e.startswith("N8N_INSTANCE_AI_MODEL=")),
                                              "lane default"), trials=cfg.iterations)
        outcome = run_async(run_stages(cfg, routing_stages(settings), console_hooks(verbose) if verbose else []))
        found = outcomes(outcome.results, cases)
        for o in found:
            mark = {"pass": "✓", "fail": "✗"}.get(o.verdict, "?")
            after = f"; after a reply {' | '.join(o.case.after)}" if o.case.direction else ""
            console.print(f"{mark} {o.case.id}: {', '.join(str(t.get('label')) for t in o.trials)} "
                          f"(accepts {' | '.join(o.case.accepts)}{after})", markup=False, highlight=False)
            for t in o.trials if verbose else []:
                console.print(f"    trial {t['trial']} ({t['durationMs'] / 1000:.1f}s, {t.get('streamStatus')}): "
                              f"{t.get('label')} from {t.get('evidence')}; calls: {', '.join(t.get('tools') or []) or 'none'}"
                              + (f"\n      judge: {t['judgeReason']}" if t.get("judgeReason") else "")
                              + (f"\n      judge error: {t['judgeError']}" if t.get("judgeError") else ""),
                              markup=False, highlight=False)
        console.print("routing summary (a case passes when 2/3 of its graded trials pass):")
        for bucket, passed, total in bucket_rates(found):
            console.print(f"  {bucket:<8} {passed}/{total}", markup=False, highlight=False)
        console.print(f"results: {out}")
        zero = [o.case.id for o in found if o.passed == 0]
        if fail_on_zero_pass and zero:
            console.print(f"[red]--fail-on-zero-pass:[/red] no trial passed in {', '.join(zero)}")
        end_of_run(outcome, failed=fail_on_zero_pass and bool(zero))

    app.command("routing")(routing)
    app.command("discovery")(routing)
