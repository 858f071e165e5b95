"""Console summary of a comparison: the same data as the PR comment, as aligned rich tables."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from orchestrator.compare.comparison import Comparison
from orchestrator.compare.pr_comment import TIER_SECTIONS, band_text, pct
from orchestrator.compare.tiers import Tier
from orchestrator.redact import redact

_STYLE = {
    Tier.hard_regression: "bold red",
    Tier.soft_regression: "dark_orange",
    Tier.unreliable_baseline: "magenta",
    Tier.watch: "yellow",
    Tier.improvement: "green",
}


def _headline(comparison: Comparison) -> Text:
    reg = comparison.tier_counts.get(Tier.hard_regression.value, 0)
    likely = comparison.tier_counts.get(Tier.soft_regression.value, 0)
    if reg:
        survive = len(comparison.regressions_surviving_bh)
        return Text(f"{reg} hard regression(s) ({survive} survive Benjamini–Hochberg)", style="bold red")
    if likely:
        return Text(f"{likely} soft regression(s)", style="dark_orange")
    return Text("no regressions", style="bold green")


def print_comparison(console: Console, comparison: Comparison) -> None:
    """Print a comparison to the terminal: the headline, both runs' pass rates, the tier counts and a
    table of every flagged unit (redacted)."""
    console.print(Text(redact(f"compare {comparison.run_id} vs baseline {comparison.baseline_run_id}: "), style="bold"),
                  _headline(comparison))
    console.print(f"  this run: {band_text(comparison.pr_band)}")
    console.print(f"  baseline: {band_text(comparison.baseline_band)}")
    console.print("  " + "  ".join(f"{tier}={n}" for tier, n in comparison.tier_counts.items() if n))
    flagged = [u for tier, _, _ in TIER_SECTIONS for u in comparison.in_tier(tier)]
    if flagged:
        table = Table(show_edge=False, pad_edge=False, header_style="bold")
        table.add_column("verdict", no_wrap=True)
        table.add_column("unit", overflow="fold", min_width=16)
        for column in ("this run", "baseline", "Δ pts", "p", "q (BH)"):
            table.add_column(column, justify="right", no_wrap=True)
        table.add_column("BH verdict", overflow="fold")
        for u in flagged:
            c = u.counts
            better = u.tier is Tier.improvement
            p, q = (u.p_better, u.q_better) if better else (u.p_worse, u.q_worse)
            table.add_row(
                Text(u.tier.value, style=_STYLE.get(u.tier, "")),
                Text(redact(u.key)),
                f"{c.pr_passes}/{c.pr_total}",
                f"{c.base_passes}/{c.base_total}",
                f"{float(c.delta) * 100:+.0f}",
                f"{p:.3g}",
                "—" if q is None else f"{q:.3g}",
                u.bh_tier.value if u.bh_tier else "—",
            )
        console.print(table)
    if comparison.drift:
        notable = [d for d in comparison.drift if d.notable]
        for d in notable:
            console.print(Text(redact(
                f"  drift: {d.category} {pct(float(d.base_rate))} → {pct(float(d.pr_rate))} "
                f"({float(d.excess):+.1f} trials beyond scaling)"), style="yellow"))
    if comparison.pr_only or comparison.baseline_only:
        console.print(f"  not compared: {len(comparison.pr_only)} unit(s) only in this run, "
                      f"{len(comparison.baseline_only)} only in the baseline")
