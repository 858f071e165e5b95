"""Glue between profiles, specs and the ledger: build a LaneSpec, rebuild Lanes from ledger entries,
read ``--base-url`` lane lists."""

from __future__ import annotations

from typing import Any

import httpx

from orchestrator.errors import ConfigError
from orchestrator.lanes.model import Lane, LaneSpec, LaneState
from orchestrator.lanes.profiles import resolve_env
from orchestrator.ledger import Entry
from orchestrator.toolchain import N8N_VERSION


def make_spec(profile: str, overrides: list[str] | None = None, **kwargs: Any) -> LaneSpec:
    """A :class:`LaneSpec` for ``profile`` with ``--env`` ``overrides`` on top (config and secret env
    apart), at the pinned n8n version; ``kwargs`` set the other fields."""
    env, secret_env = resolve_env(profile, overrides)
    return LaneSpec(n8n_version=N8N_VERSION, profile=profile, env=env, secret_env=secret_env, **kwargs)


def lane_from_entry(run_id: str, entry: Entry) -> Lane:
    """A Lane handle rebuilt from its ledger ``create`` record (for status, down and cleanup)."""
    meta = entry.meta
    handle = str(meta.get("pid") or meta.get("container_id") or meta.get("pod") or meta.get("name") or entry.id)
    return Lane(
        lane_id=entry.id,
        index=int(meta.get("index", 0) or 0),
        base_url=str(meta.get("base_url", "")),
        backend=str(meta.get("backend", "process")),
        run_id=run_id,
        state=LaneState.starting,
        handle=handle,
        started_at=entry.created_at,
    )


def parse_base_urls(value: str | None) -> list[str]:
    """The comma-separated ``--base-url`` value as URLs (trailing slash dropped). Raises
    ``ConfigError`` naming the flag for one that is not an http(s) URL."""
    urls = [u.strip().rstrip("/") for u in (value or "").split(",") if u.strip()]
    for url in urls:
        try:
            parsed = httpx.URL(url)
        except httpx.InvalidURL as exc:  # e.g. a control character pasted into the flag
            raise ConfigError(f"--base-url: {url!r}: {exc}") from None
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise ConfigError(f"--base-url: {url!r} is not an http(s) URL")
    return urls
