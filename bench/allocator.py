"""Bench: the real Allocator on simulated lanes, work stealing vs static round-robin sharding.

Build times are log-normal (median 120 s, sigma 0.6 by default). Lanes are simulated by a worker
that sleeps for the unit's build time on a virtual clock (``VirtualClockLoop``), so hours of
simulated builds take seconds. Both strategies run the same ``Allocator`` class: static sharding
is ``Allocator(..., steal=False)`` -- each lane keeps the shard it was dealt (a seeded shuffle
dealt round-robin) and nothing moves.

Figures per lane count and global-cap mode:

* makespan / lower bound, lower bound = max(total work / capacity, longest unit), capacity =
  min(global cap, lanes x per-lane cap);
* CPU seconds (``time.process_time``) of the whole stealing run, and of a bare baseline that runs
  the same sleeps under an ``asyncio.Semaphore`` on the same loop; the difference is what the
  allocator itself costs, scaled to 10,000 units.

Run: ``.venv/bin/python bench/allocator.py`` (``--help`` for sizes).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import time
from dataclasses import dataclass
from typing import Any

from orchestrator.allocator import Allocator, Outcome, ResultStatus, WorkUnit
from orchestrator.allocator.virtual_clock import run_virtual


@dataclass(frozen=True)
class Workload:
    units: list[WorkUnit]
    duration: dict[WorkUnit, float]

    @property
    def total(self) -> float:
        return sum(self.duration.values())

    @property
    def longest(self) -> float:
        return max(self.duration.values())


@dataclass(frozen=True)
class Run:
    makespan: float
    cpu_s: float
    steals: int
    max_lane_active: int
    max_active: int


def make_workload(n_units: int, n_cases: int, median_s: float, sigma: float, seed: int) -> Workload:
    rng = random.Random(seed)
    iterations = math.ceil(n_units / n_cases)
    units = [WorkUnit(f"case-{c:04d}", i) for i in range(iterations) for c in range(n_cases)][:n_units]
    mu = math.log(median_s)
    return Workload(units, {u: rng.lognormvariate(mu, sigma) for u in units})


def simulate(workload: Workload, lanes: int, *, per_lane_cap: int, global_cap: int | None, steal: bool, seed: int) -> Run:
    async def worker(lane: str, unit: WorkUnit, attempt: int) -> tuple[Outcome, Any]:
        await asyncio.sleep(workload.duration[unit])
        return Outcome.done, None

    async def main() -> Run:
        allocator = Allocator(
            [f"lane-{i:03d}" for i in range(lanes)],
            per_lane_cap=per_lane_cap,
            global_cap=global_cap,
            seed=seed,
            steal=steal,
        )
        allocator.submit(workload.units)
        cpu0 = time.process_time()
        results = await allocator.run(worker)
        cpu = time.process_time() - cpu0
        assert len(results) == len(workload.units)
        assert all(r.status is ResultStatus.done for r in results)
        stats = allocator.stats()
        return Run(
            makespan=asyncio.get_running_loop().time(),
            cpu_s=cpu,
            steals=stats.steals,
            max_lane_active=max(s.max_active for s in stats.lanes.values()),
            max_active=stats.max_active,
        )

    return run_virtual(main())


def bare_loop_cpu(workload: Workload, capacity: int) -> float:
    """CPU seconds of the same sleeps under a plain semaphore: the event loop's own share."""

    async def main() -> float:
        gate = asyncio.Semaphore(capacity)

        async def one(unit: WorkUnit) -> None:
            async with gate:
                await asyncio.sleep(workload.duration[unit])

        cpu0 = time.process_time()
        await asyncio.gather(*(one(u) for u in workload.units))
        return time.process_time() - cpu0

    return run_virtual(main())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=10_000)
    parser.add_argument("--cases", type=int, default=1_000, help="distinct case slugs (units / cases iterations each)")
    parser.add_argument("--lanes", default="10,50,200", help="comma-separated lane counts")
    parser.add_argument("--per-lane-cap", type=int, default=4)
    parser.add_argument("--median-s", type=float, default=120.0)
    parser.add_argument("--sigma", type=float, default=0.6)
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds; figures are means over them")
    args = parser.parse_args()

    seeds = [int(x) for x in args.seeds.split(",")]
    workloads = {seed: make_workload(args.units, args.cases, args.median_s, args.sigma, seed) for seed in seeds}
    per_10k = 10_000 / args.units
    print(
        f"{args.units} units ({args.cases} cases), log-normal build time median {args.median_s:g} s "
        f"sigma {args.sigma:g}; per-lane cap {args.per_lane_cap}; means over seeds {args.seeds}"
    )
    print(
        f"{'lanes':>5} {'global cap':>15} {'lower bd s':>10} {'steal/LB':>8} {'static/LB':>9} "
        f"{'steals':>6} {'max/lane':>8} {'max all':>7} {'run cpu s':>9} {'bare cpu s':>10} {'alloc cpu s/10k':>15}"
    )
    for lanes in (int(x) for x in args.lanes.split(",")):
        for mode, global_cap in (("lanes x 2", None), ("unbounded", lanes * args.per_lane_cap)):
            capacity = min(2 * lanes if global_cap is None else global_cap, lanes * args.per_lane_cap)
            rows = []
            for seed, workload in workloads.items():
                lower = max(workload.total / capacity, workload.longest)
                common = dict(per_lane_cap=args.per_lane_cap, global_cap=global_cap, seed=seed)
                stealing = simulate(workload, lanes, steal=True, **common)
                static = simulate(workload, lanes, steal=False, **common)
                bare = bare_loop_cpu(workload, capacity)
                assert stealing.max_active <= capacity and stealing.max_lane_active <= args.per_lane_cap
                rows.append((lower, stealing.makespan / lower, static.makespan / lower, stealing, bare))
            n = len(rows)
            print(
                f"{lanes:>5} {mode + f' ({capacity})':>15} {sum(r[0] for r in rows) / n:>10.0f} "
                f"{sum(r[1] for r in rows) / n:>8.3f} {sum(r[2] for r in rows) / n:>9.3f} "
                f"{sum(r[3].steals for r in rows) / n:>6.0f} {max(r[3].max_lane_active for r in rows):>8} "
                f"{max(r[3].max_active for r in rows):>7} {sum(r[3].cpu_s for r in rows) / n:>9.2f} "
                f"{sum(r[4] for r in rows) / n:>10.2f} "
                f"{sum(max(r[3].cpu_s - r[4], 0.0) for r in rows) / n * per_10k:>15.2f}"
            )


if __name__ == "__main__":
    main()
