"""Bring a lane pool up and take it down, the same way for every backend.

Bring-up, per lane and in parallel: start → wait for ``/healthz/readiness`` under a deadline →
seed the owner with ``POST /rest/e2e/reset`` → log in to prove the seed → seed the MCP registry's
mock servers (``POST /rest/mcp-registry/test/seed``, as n8n's harness) → fingerprint. A lane
that fails is torn down *before* its replacement starts (so retries never pile up lanes) and is
replaced up to ``retries`` times; then the failure is reported with the lane's last log lines.
A cancelled bring-up (Ctrl-C) tears down every lane it had started.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from orchestrator.lanes.backend import LaneBackend, LaneError
from orchestrator.lanes.fingerprint import fetch_fingerprint
from orchestrator.lanes.model import Lane, LaneSpec, LaneState
from orchestrator.n8n.owner import OwnerCredentials
from orchestrator.n8n.rest import N8nClient
from orchestrator.redact import redact, register_secret

log = logging.getLogger(__name__)

#: Fingerprint keys that must agree across the pool: a single misconfigured lane would silently
#: route some builds another way.
FINGERPRINT_ENV_KEYS = (
    "E2E_TESTS",
    "N8N_ENABLED_MODULES",
    "N8N_AI_ENABLED",
    "N8N_INSTANCE_AI_EVAL_INSTANCE",
    "N8N_INSTANCE_AI_MODEL",
    "N8N_FEATURE_FLAG_OVERRIDES",
)


def random_password() -> str:
    """A per-run password that satisfies n8n's rules (8+ chars, a digit, an upper-case letter)."""
    value = f"Ev{secrets.token_urlsafe(18)}9"
    register_secret(value)
    return value


def make_owner(run_id: str, password: str | None = None) -> OwnerCredentials:
    """The owner every lane of the run is seeded with: an ``.invalid`` address from the run id and
    ``password`` (a random one when not given), registered as a secret for redaction."""
    pw = password or random_password()
    register_secret(pw)
    return OwnerCredentials(email=f"eval-owner-{run_id[:8].lower()}@n8n-eval.invalid", password=pw)


@dataclass
class PoolEvents:
    """Hooks the run uses for metrics and progress; all optional."""

    lane_ready: Callable[[Lane, float], None] | None = None
    lane_failed: Callable[[int, str], None] | None = None


@dataclass
class BringUpResult:
    lanes: list[Lane] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


async def wait_ready(backend: LaneBackend, lane: Lane, timeout_s: float, interval_s: float = 0.5) -> None:
    """Poll ``backend.health`` every ``interval_s`` until the lane is ready. Raises :class:`LaneError`
    at once when its process/container/pod is gone (with the backend's reason when it knows one), or
    after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        if await backend.health(lane):
            return
        if await backend.is_gone(lane):
            why = await backend.gone_reason(lane)
            raise LaneError(f"{lane.describe()} " + (f"will not become ready: {why}" if why else "exited before it was ready"))
        if time.monotonic() >= deadline:
            raise LaneError(f"{lane.describe()} not ready after {timeout_s:.0f} s")
        await asyncio.sleep(interval_s)


async def seed_owner(lane: Lane, owner: OwnerCredentials) -> None:
    """Reset the lane to a known state with our owner, then prove it by logging in."""
    async with N8nClient(lane.base_url) as client:
        await client.e2e_reset(
            owner,
            admin=OwnerCredentials(f"eval-admin-{lane.run_id[:8].lower()}@n8n-eval.invalid", random_password(), "Eval", "Admin"),
            chat=OwnerCredentials(f"eval-chat-{lane.run_id[:8].lower()}@n8n-eval.invalid", random_password(), "Eval", "Chat"),
        )
        await client.set_feature("feat:folders", True)  # the reset stubs every license feature off
        session = await client.login(owner.email, owner.password)
        try:
            # as n8n's harness after each lane's login (mcp-registry/seeder.ts): the registry's mock
            # servers, so cases declaring notionMcpOAuth2Api / linearMcpOAuth2Api can build
            seeded = await session.seed_mcp_registry()
            if seeded is None:
                log.info("%s: skipped MCP registry seed (test endpoint unavailable)", lane.describe())
            lane.fingerprint = await fetch_fingerprint(client, session)  # one login (bcrypt) less per lane
        finally:
            await session.aclose()
    lane.owner = owner


async def verify_owner(lane: Lane) -> None:
    """Log in as a given owner on a lane someone else runs (never reset) and record its fingerprint;
    raises the client's error when the login fails."""
    assert lane.owner is not None
    async with N8nClient(lane.base_url) as client:
        session = await client.login(lane.owner.email, lane.owner.password)
        await session.aclose()
        lane.fingerprint = await fetch_fingerprint(client)


async def safe_teardown(backend: LaneBackend, lane: Lane) -> str | None:
    """Tear one lane down; return the failure text (also recorded in the ledger) instead of raising."""
    if not backend.owns_lanes:
        lane.state = LaneState.stopped
        return None
    try:
        await backend.teardown(lane)
        return None
    except Exception as exc:  # best effort: reported, never fatal
        msg = redact(f"{lane.describe()}: teardown failed: {exc}")
        backend.ledger.delete_failed("lane", lane.lane_id, msg, lane=lane.lane_id)
        log.error("%s", msg)
        return msg


async def bring_up_one(
    backend: LaneBackend,
    index: int,
    spec: LaneSpec,
    owner: OwnerCredentials,
    retries: int,
    started: list[Lane],
    events: PoolEvents,
) -> Lane:
    """Start lane ``index``, wait until ready and seed (or, on a given owner, check) its owner, trying
    ``retries`` more times; a failed attempt is torn down before the next. ``started`` lists the
    lanes alive at any moment (for the caller's teardown). Raises :class:`LaneError` with each
    attempt's error and log tail once every attempt failed."""
    errors: list[str] = []
    for attempt in range(retries + 1):
        t0 = time.monotonic()
        lane = await backend.start_lane(index, spec)
        started.append(lane)
        try:
            await wait_ready(backend, lane, max(spec.ready_timeout_s, backend.min_ready_timeout_s))
            if lane.owner is None:
                await seed_owner(lane, owner)
            else:  # a static lane with a given owner: never wiped, only checked
                await verify_owner(lane)
            lane.state = LaneState.ready
            if events.lane_ready:
                events.lane_ready(lane, time.monotonic() - t0)
            log.info("%s ready in %.1f s", lane.describe(), time.monotonic() - t0)
            return lane
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            tail = await backend.logs(lane, 15)
            errors.append(redact(f"attempt {attempt + 1}: {exc}\n  last log lines:\n    " + tail.replace("\n", "\n    ")))
            log.warning("%s failed (attempt %d of %d): %s", lane.describe(), attempt + 1, retries + 1, redact(str(exc)))
            started.remove(lane)
            await safe_teardown(backend, lane)  # removed before the replacement starts
    message = f"lane {index} failed {retries + 1} time(s):\n" + "\n".join(errors)
    if events.lane_failed:
        events.lane_failed(index, message)
    raise LaneError(message)


async def bring_up(
    backend: LaneBackend,
    count: int,
    spec: LaneSpec,
    owner: OwnerCredentials,
    *,
    retries: int = 1,
    min_lanes: int = 1,
    events: PoolEvents | None = None,
) -> BringUpResult:
    """Start ``count`` lanes in parallel; raise :class:`LaneError` if fewer than ``min_lanes`` came up."""
    events = events or PoolEvents()
    started: list[Lane] = []
    tasks = [asyncio.create_task(bring_up_one(backend, i, spec, owner, retries, started, events)) for i in range(count)]
    try:
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await teardown_pool(backend, list(started))
        raise
    result = BringUpResult()
    for outcome in outcomes:
        if isinstance(outcome, Lane):
            result.lanes.append(outcome)
        elif isinstance(outcome, BaseException):
            result.failures.append(redact(str(outcome)))
    result.lanes.sort(key=lambda lane: lane.index)
    if len(result.lanes) < min_lanes:
        await teardown_pool(backend, result.lanes)
        raise LaneError(
            f"only {len(result.lanes)} of {count} lanes came up (need {min_lanes}):\n" + "\n".join(result.failures)
        )
    return result


async def teardown_pool(backend: LaneBackend, lanes: list[Lane]) -> list[str]:
    """Tear every lane down concurrently; return the failures (each already logged and in the ledger)."""
    results = await asyncio.gather(*(safe_teardown(backend, lane) for lane in lanes))
    return [r for r in results if r]


def with_expected_env(lane: Lane, spec: LaneSpec, *, env_applies: bool = True) -> dict[str, str]:
    """The lane's fingerprint plus the env keys it was started with (``env_applies``: the lane was
    started from ``spec``; false for someone else's static lanes). Stored back on the lane."""
    fp = dict(lane.fingerprint)
    if env_applies:
        fp.update({f"env.{k}": spec.env.get(k, "") for k in FINGERPRINT_ENV_KEYS})
    lane.fingerprint = fp
    return fp


def fingerprint_mismatch(reference: dict[str, str], fp: dict[str, str]) -> str | None:
    """What differs between two fingerprints, in words; ``None`` when they agree."""
    diff = {k for k in set(fp) | set(reference) if fp.get(k) != reference.get(k)}
    if not diff:
        return None
    return ", ".join(f"{k}: {reference.get(k)!r} vs {fp.get(k)!r}" for k in sorted(diff))
