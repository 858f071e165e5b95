"""Benjamini–Hochberg false-discovery-rate adjustment across all compared units.

The raw tiers test every unit at its own α, so a run with many units flags some by chance alone.
The BH view re-tiers each unit with its q-value in place of its p-value; a raw regression that is
still a regression after adjustment "survives".
"""

from __future__ import annotations

from collections.abc import Sequence


def bh_q_values(p_values: Sequence[float]) -> list[float]:
    """BH-adjusted q-values, in the order of ``p_values`` (empty in, empty out)."""
    if not p_values:
        return []
    from scipy.stats import false_discovery_control  # seconds to import: not on the CLI's start-up path

    return [min(1.0, float(q)) for q in false_discovery_control(list(p_values), method="bh")]
