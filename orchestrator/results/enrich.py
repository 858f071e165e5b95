"""What a unit record carries beyond its verdicts, for the report and ``harnessUsagePerRun``.

The unit runner (``orchestrator/run/unit.py``) builds each :class:`UnitResult`; it should pass
``**unit_extras(...)`` so the record keeps the built workflow, our own model usage, the builder,
the lane URL (for "view in n8n" links) and the transcript path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def unit_extras(verification: Any, *, builder: str | None = None, base_url: str | None = None,
                transcript_path: Path | str | None = None) -> dict[str, Any]:
    """Keyword arguments for ``UnitResult(...)`` from a ``Verification`` (or None: nothing built)."""
    path = Path(transcript_path) if transcript_path else None
    return {
        "workflow": getattr(verification, "workflow", None),
        "harness_usage": getattr(verification, "usage", None),
        "builder": builder,
        "base_url": base_url,
        "transcript_path": str(path) if path is not None and path.exists() else None,
    }
