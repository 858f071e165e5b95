"""The orchestrator's own overhead per Instance AI build, beside the lane's time.

One process lane with the embedded sandbox, the scripted model in a *separate process* (so its CPU
is not ours), and ``--units`` builds of smoke cases through :class:`InstanceAiBuilder`, one after
another. For each build:

- ``wall``: the whole ``builder.build`` call;
- ``lane``: time the build spent awaiting the lane (every REST call, opening the event stream,
  waiting for the next event) — measured by wrapping those awaits;
- ``own``: ``wall - lane``, the orchestrator's own time (parsing, classification, transcript);
- ``cpu``: CPU seconds this process used during the build (a second view of the same thing).

    .venv/bin/python bench/instance_ai_overhead.py [--units 6]

The last line is ``instance-ai overhead: <seconds> s per unit`` (the mean of ``own``; goal ≤ 1 s).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.builders.builder import BuilderSettings, BuildRequest, get_builder
from orchestrator.builders.lane import BuildLane
from orchestrator.cases import load_disk
from orchestrator.lanes.bringup import bring_up, make_owner, teardown_pool
from orchestrator.lanes.pool import make_spec
from orchestrator.lanes.process.backend import ProcessBackend
from orchestrator.ledger import Ledger
from orchestrator.n8n import instance_ai as ia_client
from orchestrator.n8n import rest

CASES = Path(__file__).resolve().parents[1] / "cases"


class LaneClock:
    """Sums the time spent inside awaited lane calls (only while ``active``)."""

    def __init__(self) -> None:
        self.active = False
        self.seconds = 0.0

    def wrap(self, owner: Any, name: str) -> None:
        original: Callable[..., Any] = getattr(owner, name)

        @functools.wraps(original)
        async def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return await original(*args, **kwargs)
            finally:
                if self.active:
                    self.seconds += time.perf_counter() - t0

        setattr(owner, name, timed)


def start_model() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.scripted.server", "--script", "demo"],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--units", type=int, default=6)
    args = parser.parse_args()
    clock = LaneClock()
    clock.wrap(rest.N8nClient, "request")
    clock.wrap(ia_client.EventStream, "open")
    clock.wrap(ia_client.EventStream, "next")
    cases = [c for c in load_disk([CASES])[0] if c.slug.startswith("smoke-")]
    model, model_url = start_model()
    run_id = f"bench-ia-{int(time.time())}"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            state = Path(tmp)
            ledger = Ledger.for_run(run_id, state)
            backend = ProcessBackend(run_id, ledger, state, sandbox=True)
            spec = make_spec("eval", [f"N8N_INSTANCE_AI_MODEL_URL={model_url}", "N8N_INSTANCE_AI_MODEL_API_KEY=scripted-bench-key"])
            t0 = time.monotonic()
            pool = await bring_up(backend, 1, spec, make_owner(run_id))
            lane = pool.lanes[0]
            print(f"lane + sandbox up in {time.monotonic() - t0:.1f} s")
            ctx = await BuildLane.open(lane, ledger)
            builder = get_builder("instance-ai")(BuilderSettings(run_id=run_id, run_dir=state, model="anthropic/claude-sonnet-4-6"))
            await builder.prepare_lane(ctx)
            rows = []
            print(f"{'unit':<40} {'status':<8} {'wall s':>7} {'lane s':>7} {'own s':>7} {'cpu s':>7}")
            for n in range(args.units):
                loaded = cases[n % len(cases)]
                user = await ctx.users.acquire(loaded.case.credentials, mcp_key=False)
                request = BuildRequest(loaded.case, n, 0, 240_000, state / "transcripts" / f"{loaded.slug}.{n}.jsonl")
                clock.seconds, clock.active = 0.0, True
                cpu0, wall0 = time.process_time(), time.perf_counter()
                result = await builder.build(request, ctx, user)
                wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
                clock.active = False
                await ctx.users.release(user)
                own = wall - clock.seconds
                rows.append((wall, clock.seconds, own, cpu))
                print(f"{loaded.slug + f'.{n}':<40} {result.status.value:<8} {wall:7.2f} {clock.seconds:7.2f} {own:7.3f} {cpu:7.3f}")
            await ctx.close()
            await teardown_pool(backend, [lane])
            await backend.close()
    finally:
        model.terminate()
        model.wait(timeout=10)
    later = rows[1:] or rows  # the first build also pays the sandbox's first set-up
    print(f"lane time per unit: mean {statistics.mean(r[1] for r in rows):.2f} s "
          f"(after the first: {statistics.mean(r[1] for r in later):.2f} s); "
          f"orchestrator cpu per unit: {statistics.mean(r[3] for r in rows):.3f} s")
    print(f"instance-ai overhead: {statistics.mean(r[2] for r in rows):.3f} s per unit")


if __name__ == "__main__":
    asyncio.run(main())
