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

**Real-lane physics** (a second table, ``--scenarios``; issue 25). There a unit's time also
depends on what runs beside it (:class:`~orchestrator.allocator.virtual_clock.SharedWork`): each
extra build on a lane slows its builds by ``slowdown``; in shared-host mode every lane is on one
machine of ``host_cores`` cores, each build needs ``build_cpu`` of a core and a booting lane
``boot_cpu``, and builds slow down when the machine is over-committed; lanes join late (each
boots ``boot_s`` first, joins spread over ``join_spread_s``); dead lanes get a replacement that
joins ``boot_s`` later. ``issue table`` is issue 25's case: two co-located lanes, the second still
booting while the first runs its first units (so they are measured under contention), global cap
lanes x 2 = 4, per-lane cap 4. The lower bound there is the same fluid bound with the pool's best
rate at each moment (lanes joined and alive, the boot load, each lane's concave build-count
curve, the host's cores). Shared-host scenarios tell the allocator its lanes are co-located (as
process and Docker lanes do in a run).

Run: ``.venv/bin/python bench/allocator.py`` (``--help`` for sizes). The last line is
``worst with history: <ratio>``, the largest makespan / lower bound with history over every lane
count, cap, scenario and seed.
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
from orchestrator.allocator.virtual_clock import SharedWork, run_virtual


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


@dataclass(frozen=True)
class Scenario:
    """A pool with real-lane physics (see the module docstring)."""

    name: str
    lanes: int
    units: int
    cases: int
    median_s: float = 120.0
    slowdown: float = 0.0
    host_cores: float | None = None
    build_cpu: float = 1.0
    boot_cpu: float = 0.0
    boot_s: float = 0.0
    join_spread_s: float = 0.0
    deaths: int = 0
    replace: bool = False
    global_cap: int | None = None  # None: 2 x the live lanes
    speed_spread: float = 0.3


SCENARIOS = (
    Scenario("slowdown", lanes=10, units=1000, cases=200, slowdown=0.15, deaths=1),
    Scenario("shared host", lanes=4, units=600, cases=120, slowdown=0.1, host_cores=3.0, build_cpu=0.35,
             boot_cpu=1.0, boot_s=60.0, join_spread_s=240.0, speed_spread=0.1),
    Scenario("staggered", lanes=10, units=1000, cases=200, slowdown=0.1, boot_s=120.0, join_spread_s=600.0),
    Scenario("replaced", lanes=10, units=1000, cases=200, slowdown=0.1, boot_s=120.0, deaths=3, replace=True),
    Scenario("issue table", lanes=2, units=114, cases=38, median_s=10.0, slowdown=0.2, host_cores=2.0,
             build_cpu=0.4, boot_cpu=1.5, boot_s=20.0, join_spread_s=20.0, global_cap=4, speed_spread=0.0),
)


@dataclass(frozen=True)
class Timeline:
    """When each lane joins (it boots for ``boot_s`` before), and when lanes die."""

    speeds: dict[str, float]
    joins: dict[str, float]
    deaths: dict[str, float]


def make_timeline(sc: Scenario, horizon: float, seed: int) -> Timeline:
    rng = random.Random(seed * 104729 + sc.lanes)
    ids = lane_ids(sc.lanes)
    speeds = {lane: rng.uniform(1.0 - sc.speed_spread, 1.0 + sc.speed_spread) for lane in ids}
    joins = {lane: 0.0 if i == 0 else rng.uniform(0.0, sc.join_spread_s) for i, lane in enumerate(ids)}
    deaths: dict[str, float] = {}
    for i, lane in enumerate(sorted(rng.sample(ids, sc.deaths))):
        deaths[lane] = rng.uniform(0.2, 0.6) * horizon
        if sc.replace:
            new = f"{lane}-r{i}"
            speeds[new] = rng.uniform(1.0 - sc.speed_spread, 1.0 + sc.speed_spread)
            joins[new] = deaths[lane] + sc.boot_s
    return Timeline(speeds, joins, deaths)


def _boot_load(sc: Scenario, tl: Timeline, now: float) -> float:
    booting = sum(1 for lane, at in tl.joins.items() if at - sc.boot_s <= now < at and at > 0)
    return sc.boot_cpu * booting


def pool_rate(sc: Scenario, alive: list[str], speeds: dict[str, float], boot_load: float, per_lane_cap: int) -> float:
    """Most work per second the pool can do: the best build counts per lane (each lane's curve
    k / (1 + slowdown (k - 1)) is concave, so the best N slots are the N largest marginals), under
    the global cap and the host's cores."""
    marginals = sorted(
        (speeds[lane] * (k / (1 + sc.slowdown * (k - 1)) - (k - 1) / (1 + sc.slowdown * max(k - 2, 0)))
         for lane in alive for k in range(1, per_lane_cap + 1)),
        reverse=True,
    )
    cap = sc.global_cap if sc.global_cap is not None else 2 * len(alive)
    best, total = 0.0, 0.0
    for n, m in enumerate(marginals[:cap], start=1):
        total += m
        host = 1.0
        if sc.host_cores is not None:
            demand = sc.build_cpu * n + boot_load
            host = min(1.0, sc.host_cores / demand)
        best = max(best, total * host)
    return best


def scenario_bound(sc: Scenario, workload: Workload, tl: Timeline, per_lane_cap: int) -> float:
    """Fluid lower bound over the segments between joins, deaths and boot-load changes."""
    events = sorted({0.0, *tl.joins.values(), *tl.deaths.values(),
                     *(at - sc.boot_s for at in tl.joins.values() if at > 0)})
    remaining = workload.total
    for i, start in enumerate(events):
        alive = [lane for lane, at in tl.joins.items() if at <= start and tl.deaths.get(lane, float("inf")) > start]
        rate = pool_rate(sc, alive, tl.speeds, _boot_load(sc, tl, start), per_lane_cap) if alive else 0.0
        end = events[i + 1] if i + 1 < len(events) else float("inf")
        if rate > 0 and rate * (end - start) >= remaining:
            fluid = start + remaining / rate
            break
        remaining -= rate * (end - start) if end != float("inf") else 0.0
    else:  # pragma: no cover - the last segment is unbounded
        raise AssertionError("no live lane at the end")
    longest = max(workload.work.values()) / max(tl.speeds.values())
    return max(fluid, longest)


def simulate_scenario(sc: Scenario, workload: Workload, tl: Timeline, *, per_lane_cap: int, steal: bool,
                      history: bool, seed: int) -> float:
    async def main() -> float:
        loop = asyncio.get_running_loop()
        shared = SharedWork(tl.speeds, slowdown=sc.slowdown, host_cores=sc.host_cores, build_cpu=sc.build_cpu,
                            background=lambda now: _boot_load(sc, tl, now))

        async def worker(lane: str, unit: WorkUnit, attempt: int) -> tuple[Outcome, Any]:
            await shared.run(lane, workload.work[unit])
            return Outcome.done, None

        first = [lane for lane, at in tl.joins.items() if at == 0.0]
        allocator = Allocator(first, per_lane_cap=per_lane_cap, global_cap=sc.global_cap, seed=seed, steal=steal,
                              max_lane_fault_retries=10, co_located=sc.host_cores is not None)
        for lane, at in tl.joins.items():
            if at > 0:
                loop.call_at(at, allocator.add_lane, lane)
                loop.call_at(at, shared.touch)
                loop.call_at(at - sc.boot_s, shared.touch)
        for lane, at in tl.deaths.items():
            loop.call_at(at, allocator.drain, lane, "lane died")
        allocator.submit(workload.units, expected_s=workload.history if history else None)
        results = await allocator.run(worker)
        assert all(r.status is ResultStatus.done for r in results), {r.status for r in results}
        return max(r.finished_at for r in results)

    return run_virtual(main())


def run_scenarios(args: argparse.Namespace, seeds: list[int]) -> float:
    print("real-lane physics (issue 25): per-lane slowdown, shared host, late joins, replacements")
    print(f"{'scenario':>12} {'lanes':>5} {'units':>5} {'lower bd s':>10} {'steal+hist':>15} {'steal':>15} {'static':>15}")
    worst = 0.0
    for sc in SCENARIOS:
        ratios: dict[str, list[float]] = {"hist": [], "steal": [], "static": []}
        lowers = []
        for seed in seeds:
            workload = make_workload(sc.units, sc.cases, sc.median_s, args.sigma, args.history_error, seed)
            horizon = workload.total / max(sc.lanes * 2, 1)
            tl = make_timeline(sc, horizon, seed)
            lower = scenario_bound(sc, workload, tl, args.per_lane_cap)
            lowers.append(lower)
            for name, steal, history in (("hist", True, True), ("steal", True, False), ("static", False, False)):
                makespan = simulate_scenario(sc, workload, tl, per_lane_cap=args.per_lane_cap, steal=steal,
                                             history=history, seed=seed)
                ratios[name].append(makespan / lower)
        worst = max(worst, *ratios["hist"])

        def fmt(values: list[float]) -> str:
            return f"{sum(values) / len(values):.3f} ({max(values):.3f})"

        print(f"{sc.name:>12} {sc.lanes:>5} {sc.units:>5} {sum(lowers) / len(lowers):>10.0f} {fmt(ratios['hist']):>15} "
              f"{fmt(ratios['steal']):>15} {fmt(ratios['static']):>15}")
    return worst


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
    parser.add_argument("--scenarios", choices=("all", "only", "none"), default="all",
                        help="the real-lane physics table: with the first table, alone, or not at all")
    args = parser.parse_args()

    seeds = [int(x) for x in args.seeds.split(",")]
    if args.scenarios == "only":
        print(f"worst with history: {run_scenarios(args, seeds):.3f}")
        return
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
    if args.scenarios == "all":
        worst = max(worst, run_scenarios(args, seeds))
    print(f"worst with history: {worst:.3f}")


if __name__ == "__main__":
    main()
