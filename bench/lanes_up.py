"""Seconds to bring up 1, 2 and 4 process lanes, ready (``/healthz/readiness``) and seeded (owner
reset + login), each pool from a fresh state folder, torn down after. Prints one line a pool.

    .venv/bin/python bench/lanes_up.py [--counts 1,2,4] [--repeat 1]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from orchestrator.lanes.bringup import bring_up, make_owner, teardown_pool
from orchestrator.lanes.pool import make_spec
from orchestrator.lanes.process import ProcessBackend
from orchestrator.ledger import Ledger


async def one_pool(count: int, state: Path) -> tuple[float, list[float]]:
    run_id = f"bench-{count}-{int(time.time())}"
    backend = ProcessBackend(run_id, Ledger.for_run(run_id, state), state)
    per_lane: list[float] = []
    from orchestrator.lanes.bringup import PoolEvents

    t0 = time.monotonic()
    result = await bring_up(backend, count, make_spec("eval"), make_owner(run_id),
                            events=PoolEvents(lane_ready=lambda lane, s: per_lane.append(s)))
    total = time.monotonic() - t0
    await teardown_pool(backend, result.lanes)
    await backend.close()
    return total, per_lane


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--counts", default="1,2,4")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for count in (int(c) for c in args.counts.split(",")):
            for r in range(args.repeat):
                total, per_lane = await one_pool(count, Path(tmp) / f"{count}-{r}")
                slowest = max(per_lane) if per_lane else float("nan")
                print(f"lanes={count} ready+seeded in {total:6.1f} s (slowest lane {slowest:.1f} s, "
                      f"mean {sum(per_lane) / len(per_lane):.1f} s)")


if __name__ == "__main__":
    asyncio.run(main())
