"""Run ids: ``YYYYmmdd-HHMMSS-<6 hex>``, sortable by start time and unique per machine in practice."""

from __future__ import annotations

import secrets
import time


def new_run_id(prefix: str = "") -> str:
    """A fresh run id: ``prefix``, the local time (``YYYYmmdd-HHMMSS``) and 6 random hex digits."""
    return prefix + time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)
