"""The ``WORKFLOW_ID=<id>`` trailer a build prompt asks claude to end its answer with."""

from __future__ import annotations

import re

TRAILER_PATTERN = re.compile(r"WORKFLOW_ID=([A-Za-z0-9_-]+)")


def last_workflow_id(text: str | None) -> str | None:
    """The id of the LAST ``WORKFLOW_ID=…`` in ``text`` (earlier ones may be drafts), or None."""
    if not text:
        return None
    matches = TRAILER_PATTERN.findall(text)
    return matches[-1] if matches else None


def trailer_line(workflow_id: str) -> str:
    """The line that names the built workflow at the end of claude's answer (``WORKFLOW_ID=<id>``)."""
    return f"WORKFLOW_ID={workflow_id}"
