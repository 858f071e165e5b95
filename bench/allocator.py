"""Bench: the real Allocator on simulated lanes that differ in speed and die -- work stealing with
and without history, and static sharding, against a lower bound that accounts for both.

The simulation (all seeded; the same seed gives the same figures):

* **Work.** ``--cases`` cases, each with a base time log-normal (median ``--median-s``, sigma
  ``--sigma``); each of its iterations takes base x exp(N(0, e/sqrt 2)) of work, and history (a
  previous run's median for the case) says base x exp(N(0, e/sqrt 2)), so log(history / actual)
  has sigma e = ``--history-error`` (0.3).
* **Lanes.** Speeds uniform in [1 - s, 1 + s] (``--speed-spread`` 0.3); a unit of work w takes
  w / speed seconds on a lane, whatever else the lane runs (the model: lanes on nodes of different
  speed; n8n's own slowdown under load is not modelled). ``--deaths`` (2 %) of the lanes, at
  least one, die at a random time in [0.2, 0.8] x the lower bound: the allocator is told with
  ``drain()`` (as the run's health monitor does), their builds in flight are lost and requeued.
  Dead lanes are not replaced here.
* **Strategies**, all the same ``Allocator`` class: work stealing with history
  (``submit(..., expected_s=history)``), work stealing without, and static sharding
  (``steal=False``: each lane keeps the seeded shard it was dealt; a dead lane's shard moves to
  the least loaded lanes).
* **Global caps**: ``lanes x 2`` (the default: 2 x the live lanes, so it shrinks when a lane dies)
  and ``none`` (only the per-lane cap).

Lower bound (fluid): at time t the pool can do at most ``rate(t)`` = the sum of the fastest
``cap(t)`` slot speeds among live lanes (each live lane has ``--per-lane-cap`` slots at its
speed) units of work per second; the makespan is at least the T with integral_0^T rate = total
work. Also at least the longest unit on the fastest lane. Work lost in dying lanes is not counted,
so the bound stays a bound (it is optimistic by that much).

CPU: ``time.process_time`` of each with-history run minus a bare loop running the same sleeps
under a semaphore, per unit.

Run: ``.venv/bin/python bench/allocator.py`` (``--help`` for sizes). The last line is
``worst with history: <ratio>``, the largest makespan / lower bound with history over every lane
count, cap and seed.
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
    work: dict[WorkUnit, float]  # seconds of work at speed 1.0
    history: dict[str, float]  # expected seconds per case, with estimation error

    @property
    def total(self) -> float:
        return sum(self.work.values())


@dataclass(frozen=True)
class Pool:
    speeds: dict[str, float]
    deaths: dict[str, float]  # lane -> time it dies


@dataclass(frozen=True)
class Run:
    makespan: float
    cpu_s: float
    steals: int
    max_lane_active: int
    max_active: int


def make_workload(n_units: int, n_cases: int, median_s: float, sigma: float, error: float, seed: int) -> Workload:
    rng = random.Random(seed)
    iterations = math.ceil(n_units / n_cases)
    base = {f"case-{c:04d}": rng.lognormvariate(math.log(median_s), sigma) for c in range(n_cases)}
    part = error / math.sqrt(2)
    units = [WorkUnit(case, i) for i in range(iterations) for case in base][:n_units]
    work = {u: base[u.case] * math.exp(rng.gauss(0.0, part)) for u in units}
    history = {case: b * math.exp(rng.gauss(0.0, part)) for case, b in base.items()}
    return Workload(units, work, history)


def lane_ids(lanes: int) -> list[str]:
    return [f"lane-{i:03d}" for i in range(lanes)]


def make_pool(lanes: int, spread: float, death_share: float, horizon: float, seed: int) -> Pool:
    rng = random.Random(seed * 7919 + lanes)
    ids = lane_ids(lanes)
    speeds = {lane: rng.uniform(1.0 - spread, 1.0 + spread) for lane in ids}
    dying = rng.sample(ids, max(1, round(death_share * lanes))) if death_share > 0 else []
    return Pool(speeds, {lane: rng.uniform(0.2, 0.8) * horizon for lane in sorted(dying)})


def fluid_bound(workload: Workload, pool: Pool, *, per_lane_cap: int, cap_per_live_lane: int | None) -> float:
    """The lower bound described in the module docstring."""

    def rate(alive: list[str]) -> float:
        slots = sorted((pool.speeds[lane] for lane in alive for _ in range(per_lane_cap)), reverse=True)
        cap = len(slots) if cap_per_live_lane is None else cap_per_live_lane * len(alive)
        return sum(slots[:cap])

    remaining = workload.total
    now = 0.0
    alive = sorted(pool.speeds)
    for lane, dies_at in sorted(pool.deaths.items(), key=lambda kv: kv[1]):
        r = rate(alive)
        if r * (dies_at - now) >= remaining:
            break
        remaining -= r * (dies_at - now)
        now = dies_at
        alive.remove(lane)
    fluid = now + remaining / rate(alive)
    longest = max(workload.work.values()) / max(pool.speeds.values())
    return max(fluid, longest)


def simulate(workload: Workload, pool: Pool, *, per_lane_cap: int, global_cap: int | None, steal: bool,
             history: bool, seed: int) -> Run:
    async def worker(lane: str, unit: WorkUnit, attempt: int) -> tuple[Outcome, Any]:
        await asyncio.sleep(workload.work[unit] / pool.speeds[lane])
        return Outcome.done, None

    async def main() -> Run:
        allocator = Allocator(list(pool.speeds), per_lane_cap=per_lane_cap, global_cap=global_cap, seed=seed,
                              steal=steal, max_lane_fault_retries=10)
        loop = asyncio.get_running_loop()
        for lane, at in pool.deaths.items():
            loop.call_at(at, allocator.drain, lane, "lane died")
        cpu0 = time.process_time()
        allocator.submit(workload.units, expected_s=workload.history if history else None)
        results = await allocator.run(worker)
        cpu = time.process_time() - cpu0
        assert len(results) == len(workload.units)
        assert all(r.status is ResultStatus.done for r in results), {r.status for r in results}
        stats = allocator.stats()
        return Run(loop.time(), cpu, stats.steals, max(s.max_active for s in stats.lanes.values()), stats.max_active)

    return run_virtual(main())


def bare_loop_cpu(workload: Workload, capacity: int) -> float:
    """CPU seconds of the same sleeps under a plain semaphore: the event loop's own share."""

    async def main() -> float:
        gate = asyncio.Semaphore(capacity)

        async def one(unit: WorkUnit) -> None:
            async with gate:
                await asyncio.sleep(workload.work[unit])

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
    parser.add_argument("--history-error", type=float, default=0.3, help="sigma of log(history / actual)")
    parser.add_argument("--speed-spread", type=float, default=0.3, help="lane speeds uniform in [1-s, 1+s]")
    parser.add_argument("--deaths", type=float, default=0.02, help="share of lanes that die mid-run (at least one)")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds; ratios are means (and max) over them")
    args = parser.parse_args()

    seeds = [int(x) for x in args.seeds.split(",")]
    workloads = {
        seed: make_workload(args.units, args.cases, args.median_s, args.sigma, args.history_error, seed) for seed in seeds
    }
    print(
        f"{args.units} units ({args.cases} cases), log-normal work median {args.median_s:g} s sigma {args.sigma:g}, "
        f"history error sigma {args.history_error:g}; lane speeds 1±{args.speed_spread:g}, "
        f"{args.deaths:.0%} of lanes die (≥1); per-lane cap {args.per_lane_cap}; seeds {args.seeds}"
    )
    print("ratios: makespan / lower bound, mean over seeds (max in brackets)")
    print(
        f"{'lanes':>5} {'global cap':>10} {'deaths':>6} {'lower bd s':>10} {'steal+hist':>15} {'steal':>15} "
        f"{'static':>15} {'steals':>6} {'max/lane':>8} {'alloc ms/unit':>13}"
    )
    worst = 0.0
    worst_cpu = 0.0
    for lanes in (int(x) for x in args.lanes.split(",")):
        for mode, global_cap, per_live in (("lanes x 2", None, 2), ("none", lanes * args.per_lane_cap, None)):
            ratios: dict[str, list[float]] = {"hist": [], "steal": [], "static": []}
            lowers, steals, max_lane, cpu_ms = [], [], 0, []
            deaths = 0
            for seed, workload in workloads.items():
                # Deaths fall in [0.2, 0.8] of the bound without deaths; then the bound with them.
                horizon = fluid_bound(workload, make_pool(lanes, args.speed_spread, 0.0, 0.0, seed),
                                      per_lane_cap=args.per_lane_cap, cap_per_live_lane=per_live)
                pool = make_pool(lanes, args.speed_spread, args.deaths, horizon, seed)
                deaths = len(pool.deaths)
                lower = fluid_bound(workload, pool, per_lane_cap=args.per_lane_cap, cap_per_live_lane=per_live)
                common = dict(per_lane_cap=args.per_lane_cap, global_cap=global_cap, seed=seed)
                with_history = simulate(workload, pool, steal=True, history=True, **common)
                stealing = simulate(workload, pool, steal=True, history=False, **common)
                static = simulate(workload, pool, steal=False, history=False, **common)
                capacity = min(2 * lanes if global_cap is None else global_cap, lanes * args.per_lane_cap)
                assert with_history.max_active <= capacity and with_history.max_lane_active <= args.per_lane_cap
                bare = bare_loop_cpu(workload, capacity)
                lowers.append(lower)
                ratios["hist"].append(with_history.makespan / lower)
                ratios["steal"].append(stealing.makespan / lower)
                ratios["static"].append(static.makespan / lower)
                steals.append(with_history.steals)
                max_lane = max(max_lane, with_history.max_lane_active)
                cpu_ms.append(max(with_history.cpu_s - bare, 0.0) / len(workload.units) * 1000)
            worst = max(worst, *ratios["hist"])
            worst_cpu = max(worst_cpu, *cpu_ms)

            def fmt(values: list[float]) -> str:
                return f"{sum(values) / len(values):.3f} ({max(values):.3f})"

            print(
                f"{lanes:>5} {mode:>10} {deaths:>6} {sum(lowers) / len(lowers):>10.0f} {fmt(ratios['hist']):>15} "
                f"{fmt(ratios['steal']):>15} {fmt(ratios['static']):>15} {sum(steals) / len(steals):>6.0f} "
                f"{max_lane:>8} {sum(cpu_ms) / len(cpu_ms):>13.3f}"
            )
    print(f"allocator CPU: at most {worst_cpu:.3f} ms per unit (with history, beyond a bare event loop)")
    print(f"worst with history: {worst:.3f}")


if __name__ == "__main__":
    main()
