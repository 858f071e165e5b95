"""``orchestrator mcp-manifest``: the seed's ``eval:build-mcp-manifest`` on the lanes."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from orchestrator.cli.common import positive, run_async
from orchestrator.cli.harness_common import console, console_hooks, end_of_run
from orchestrator.cli.run_options import run_options
from orchestrator.harnesses import MCP_BUILDER
from orchestrator.run.config import RunConfig


def register(app: typer.Typer) -> None:
    @app.command("mcp-manifest")
    @run_options(builder=MCP_BUILDER)
    def mcp_manifest(
        cfg: RunConfig,
        n: Optional[int] = typer.Option(None, "-n", help="Builds per case (the same as --iterations)."),
        j: Optional[int] = typer.Option(None, "-j", help="Parallel builds (the same as --concurrency)."),
        append: bool = typer.Option(False, "--append", help="Add to the existing manifest instead of replacing the "
                                                            "slugs just built."),
        manifest: Optional[Path] = typer.Option(None, "--manifest", help="Manifest path (default "
                                                "<output-dir>/manifest.json; stats beside it, <name>-stats.json)."),
        log_dir: Optional[Path] = typer.Option(None, "--log-dir", help="Copy each build's transcript there."),
        cohort: str = typer.Option("instance-mcp", "--cohort", help="Label written into manifest-stats.json (the "
                                                                    "seed's --builder LABEL)."),
        model: Optional[str] = typer.Option(None, "--model", help="Model claude builds with (default ANTHROPIC_MODEL, "
                                                                  "then claude-opus-4-8)."),
        project_id: Optional[str] = typer.Option(None, "--project-id", help="Keep the workflows in this n8n project "
                                                 "(default: the lane owner's personal project)."),
        verbose: bool = typer.Option(False, "--verbose", "-v", help="One line per build."),
    ) -> None:
        """Build each selected case with claude -p over the lane's MCP server and write manifest.json
        (the --prebuilt-workflows schema, checked with its loader) and manifest-stats.json (cost, turns,
        duration, tool calls). The workflows are kept on the lane: use a lane that outlives this
        command (--backend static --base-url) to score them with run --prebuilt-workflows."""
        from orchestrator.harnesses.common import internal_results, run_stages
        from orchestrator.harnesses.mcp_manifest.harness import ManifestSettings, manifest_stages, manifest_summary

        if n is not None:
            cfg = cfg.replace(iterations=positive(n, "-n") or cfg.iterations)
        if j is not None:
            cfg = cfg.replace(concurrency=positive(j, "-j"))
        if model:
            cfg = cfg.replace(build_model=model)
        out = cfg.output_dir or Path("results") / "mcp-manifest"
        settings = ManifestSettings(manifest or out / "manifest.json", cohort, append, project_id, log_dir)
        cfg = internal_results(cfg.replace(verbose=verbose))  # the folder holds the manifest, its stats, the logs
        outcome = run_async(run_stages(cfg, manifest_stages(settings), console_hooks(verbose) if verbose else []))
        console.print(f"[bold]{outcome.run_id}[/bold]: {manifest_summary(settings)}")
        console.print(f"manifest: {settings.manifest} (stats: {settings.stats})")
        end_of_run(outcome)
