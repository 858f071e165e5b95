"""How long each case is expected to take (build + verify), so the allocator can start the longest
units first.

History (``{case slug: seconds}``) is read from an earlier run by :mod:`orchestrator.results.history`.
Cases the history has not seen get a prior from their complexity: the median of the seen cases of
the same complexity, else the median of all seen cases scaled by :data:`COMPLEXITY_WEIGHT`, else
the weight alone (only the order matters).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping

#: Relative cost of a case by complexity when nothing better is known (``complex`` cases also get
#: 1.5x the unit timeout in ``run/unit.py``; builds of complex cases take ~2-3x the turns).
COMPLEXITY_WEIGHT: dict[str, float] = {"simple": 1.0, "medium": 2.0, "complex": 3.0}


def expected_seconds(
    complexities: Mapping[str, str], history: Mapping[str, float] | None = None
) -> dict[str, float]:
    """Expected seconds for every case in ``complexities`` (``{slug: complexity}``): its history
    when known, else the complexity prior described in the module docstring."""
    history = {k: v for k, v in (history or {}).items() if v > 0}
    by_complexity: dict[str, list[float]] = {}
    for slug, seconds in history.items():
        if slug in complexities:
            by_complexity.setdefault(complexities[slug], []).append(seconds)
    # The scale for unseen complexities: the seen cases of this selection (else all history),
    # their median time per unit of complexity weight.
    seen = [s for s in history if s in complexities] or list(history)
    overall = statistics.median(history[s] for s in seen) if seen else None
    overall_weight = statistics.median(COMPLEXITY_WEIGHT.get(complexities.get(s, ""), 2.0) for s in seen) if seen else 2.0
    expected: dict[str, float] = {}
    for slug, complexity in complexities.items():
        if slug in history:
            expected[slug] = history[slug]
        elif complexity in by_complexity:
            expected[slug] = statistics.median(by_complexity[complexity])
        else:
            weight = COMPLEXITY_WEIGHT.get(complexity, 2.0)
            expected[slug] = overall * weight / overall_weight if overall is not None else weight
    return expected
