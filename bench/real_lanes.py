"""Bench: the allocator on real process lanes (issue 25), beside the simulation of bench/allocator.py.

``orchestrator run`` in-process, ``--builder instance-ai`` on ``--lanes`` (4) process lanes, the
bundled corpus x ``--iterations`` (34 x 2 = 68 units), against the embedded scripted model whose
Instance AI agent answers each call after a per-case delay: log-normal (median ``--median-s``,
4 s, sigma ``--sigma``), drawn once per case from ``--seed`` and the case's prompt, so a case's
builds take about the same time on every lane and in every run. At 4 s a unit takes 17 s (median;
up to ~55 s; n8n's harness README gives ~60-180 s for a full build): the model's waits dominate,
and 2 cores have CPU to spare. At 1.5 s units take 8-9 s (up to ~26 s), the 8 concurrent builds'
own CPU (n8n, its agent, the sandbox's ``npm install``) keeps 2 cores 75-100 % busy, and a unit
takes ~20 % longer with 8 builds on the host than with 4: the bench measures the machine more
than the schedule. The same state dir serves all runs, in this order:

* ``steal``: plain work stealing without history (every unit equal, least-loaded lane first);
* ``static``: static sharding (each lane runs the shard it was dealt);
* ``default``: what ``orchestrator run`` does -- history (the newest finished run in the state
  dir: the two above), longest first, the speed model.

Per policy: the makespan (the pool starting to the last unit finished: the first lane's ready
time plus first unit started to last finished), a lower bound, the ratio, the seconds any lane sat
idle while a unit still waited (:mod:`orchestrator.results.idle`, from each lane's first unit on),
and the slot use (how full the usable slots were, each unit counted at its own time in that run).

The lower bound is the first lane's ready time + the units' work on the usable concurrency, and a
unit needs two things that are both finite here:

* slot time: its least wall time in any of the runs, on min(global cap, lanes x per-lane cap)
  slots (``slot-only ratio``: the makespan against this alone);
* CPU: process lanes share this machine's cores, and their builds (n8n, its agent, the sandbox's
  ``npm install`` and ``tsx`` runs) keep them busy: the least CPU any policy's unit phase took
  (:class:`HostCpu`), on the machine's cores.

Whichever is larger binds: at the default model latency the slots; at 1.5 s on a slow 2-core
machine it can be the CPU, and no schedule that keeps 8 builds running brings units down to their
least wall time then (measured while the host was less loaded: in the static run, 4 builds on one
lane).
Last line: ``real lanes: R (idle while work waited: S s)`` for the default policy.

    .venv/bin/python bench/real_lanes.py [--lanes 4] [--iterations 2] [--median-s 4] [--policies steal,static,default] [--keep DIR]

``--keep DIR`` keeps each policy's results and ``report.html`` (lane timelines) in ``DIR/<policy>``.
Needs the n8n toolchain (scripts/setup.sh); takes about 10-15 minutes. The machine's other load
shows in the figures: run it on a quiet machine for numbers to compare.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import math
import os
import random
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import orchestrator.run.execute as execute_stage
from orchestrator.allocator import Allocator
from orchestrator.results.idle import idle_while_waiting, total_seconds
from orchestrator.results.model import EvalResults
from orchestrator.run.config import RunConfig
from orchestrator.run.pipeline import run
from orchestrator.scripted import instance_ai as ia
from orchestrator.scripted.replies import Action
from orchestrator.scripted.scripts import demo_script
from orchestrator.scripted.server import ScriptedModelServer

CASES = Path(__file__).resolve().parents[1] / "cases"
FAKE_KEY = "sk-ant-bench-real-lanes-not-a-key"


def delayed_script(seed: int, median_s: float, sigma: float) -> Any:
    """The demo script; the lane's Instance AI agent answers after its case's delay."""
    inner = demo_script()
    delays: dict[str, float] = {}

    def delay_for(prompt: str) -> float:
        if prompt not in delays:
            digest = hashlib.sha256(f"{seed}:{prompt}".encode()).digest()
            delays[prompt] = random.Random(digest).lognormvariate(math.log(median_s), sigma)
        return delays[prompt]

    def script(request: dict[str, Any]) -> Action:
        if ia.is_instance_ai_agent(request):
            texts = ia.user_texts(request)
            if texts:
                time.sleep(delay_for(ia.clean_prompt(texts[0][1])))
        return inner(request)

    return script


class HostCpu:
    """The machine's busy CPU seconds so far (``/proc/stat``: all but idle and iowait), sampled every
    ``interval`` s on a thread as (wall time, seconds). The whole machine, not this process tree:
    summed over the tree (own and reaped children's times), a run here showed about two thirds of
    what the machine spent -- the sandboxes' jails (own pid namespace and cgroup, killed with it)
    and the kernel's work for the lanes' loopback traffic are missing. On a quiet machine the
    machine's CPU is the run's."""

    def __init__(self, interval: float = 0.5) -> None:
        self.interval = interval
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="host-cpu", daemon=True)
        self._tick = os.sysconf("SC_CLK_TCK")

    def __enter__(self) -> HostCpu:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.time(), self.read()))
            self._stop.wait(self.interval)

    def read(self) -> float:
        with open("/proc/stat") as stat:
            ticks = [int(x) for x in stat.readline().split()[1:]]
        return (sum(ticks) - ticks[3] - ticks[4]) / self._tick

    def at(self, when: float) -> float:
        """The busy CPU seconds at wall time ``when`` (linear between samples)."""
        before = [(t, c) for t, c in self.samples if t <= when]
        after = [(t, c) for t, c in self.samples if t >= when]
        if not before or not after:
            return (before or after)[-1 if before else 0][1]
        (t0, c0), (t1, c1) = before[-1], after[0]
        return c0 if t1 == t0 else c0 + (c1 - c0) * (when - t0) / (t1 - t0)


def policy_allocator(policy: str) -> type[Allocator]:
    class PolicyAllocator(Allocator):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **{**kwargs, "steal": policy != "static"})

        def submit(self, units: Any, *, lane: str | None = None, expected_s: Any = None) -> None:
            super().submit(units, lane=lane, expected_s=expected_s if policy == "default" else None)

    return PolicyAllocator


async def run_policy(policy: str, args: argparse.Namespace, state: Path, out: Path) -> EvalResults:
    # the bench swaps the class the run stage builds its allocator from: a deliberate patch of a name
    # execute.py imports (and does not export), which no type can state
    setattr(execute_stage, "Allocator", policy_allocator(policy))  # noqa: B010
    cfg = RunConfig(
        cases_paths=[CASES], iterations=args.iterations, lanes=args.lanes, builder="instance-ai",
        backend="process", model_server="real", state_dir=state, output_dir=out / policy,
        run_id=f"real-lanes-{policy}-{os.urandom(2).hex()}", seed=args.seed,
        # the bound's usable concurrency, fixed: the model gateway's rule would raise the cap past it
        # (up to lanes x per-lane cap) and the ratio would no longer compare the schedule to its bound
        concurrency=args.lanes * 2, per_lane_builds=args.per_lane_cap,
        # the lanes' agent asks our delaying server, with the run's (fake) key
        env=[f"N8N_INSTANCE_AI_MODEL_URL={os.environ['ANTHROPIC_BASE_URL']}",
             "N8N_INSTANCE_AI_MODEL=anthropic/claude-sonnet-4-6"],
        lane_model_key_env="ANTHROPIC_API_KEY",
    )
    outcome = await run(cfg)
    if any(u.build.status.value == "skipped" for u in outcome.results.units):
        raise SystemExit(f"{policy}: interrupted")
    if outcome.errors:
        print(f"{policy}: errors: {outcome.errors}", file=sys.stderr)
    return outcome.results


def lane_figures(results: EvalResults) -> tuple[float, float, float, dict[str, list[tuple[float, float]]]]:
    """(makespan, first lane ready, units run, idle stretches per lane) of one run."""
    units = [u for u in results.units if u.lane and u.finished_at >= u.started_at > 0]
    if not units:
        return math.nan, math.nan, 0, {}
    first = min(u.started_at for u in units)
    end = max(u.finished_at for u in units)
    busy: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for u in units:
        busy[u.lane or ""].append((u.started_at, u.finished_at))
    windows = {lane: (min(s for s, _ in spans), end) for lane, spans in busy.items()}
    idle = idle_while_waiting(busy, last_start=max(u.started_at for u in units), windows=windows)
    ready = float(results.config.get("first_lane_ready_s") or 0.0)  # type: ignore[arg-type]
    return ready + end - first, ready, len(units), idle


def slot_use(results: EvalResults, concurrency: int, span: float) -> float:
    """The share of the usable slots' time (from the first unit's start to the last unit's end)
    that units of this run filled, counting each at the time it took *in this run*: the schedule's
    packing, apart from how much the host's load stretched the units (which the ratio includes)."""
    busy = sum(u.finished_at - u.started_at for u in results.units if u.lane and u.finished_at >= u.started_at > 0)
    return busy / (concurrency * span) if span > 0 else math.nan


def unit_phase_cpu(results: EvalResults, cpu: HostCpu) -> float:
    """Busy CPU seconds of the machine from the run's first unit started to its last finished."""
    ran = [u for u in results.units if u.lane and u.finished_at >= u.started_at > 0]
    if not ran:
        return math.nan
    return cpu.at(max(u.finished_at for u in ran)) - cpu.at(min(u.started_at for u in ran))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lanes", type=int, default=4)
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--median-s", type=float, default=4.0, help="median delay of one agent answer")
    parser.add_argument("--sigma", type=float, default=0.6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--per-lane-cap", type=int, default=4)
    parser.add_argument("--policies", default="steal,static,default", help="comma-separated, run in this order")
    parser.add_argument("--keep", type=Path, default=None, help="keep each run's results and report here")
    args = parser.parse_args()

    server = ScriptedModelServer(delayed_script(args.seed, args.median_s, args.sigma)).start()
    os.environ["ANTHROPIC_API_KEY"] = FAKE_KEY
    os.environ["ANTHROPIC_BASE_URL"] = server.base_url
    policies = tuple(args.policies.split(","))
    results: dict[str, EvalResults] = {}
    cores = len(os.sched_getaffinity(0))
    try:
        with tempfile.TemporaryDirectory(prefix="real-lanes-") as tmp, HostCpu() as cpu:
            for policy in policies:
                t0 = time.monotonic()
                out = args.keep or Path(tmp) / "out"
                results[policy] = asyncio.run(run_policy(policy, args, Path(tmp) / "state", out))
                print(f"{policy}: {len(results[policy].units)} units in {time.monotonic() - t0:.0f} s", file=sys.stderr)
    finally:
        server.stop()

    work: dict[tuple[str, int], float] = {}
    for res in results.values():
        for u in res.units:
            if u.lane and u.finished_at >= u.started_at > 0:
                key = (u.case, u.iteration)
                work[key] = min(work.get(key, math.inf), u.finished_at - u.started_at)
    phase_cpu = {policy: unit_phase_cpu(results[policy], cpu) for policy in policies}
    host_work = min(phase_cpu.values())  # the least CPU any policy needed to run these units
    concurrency = min(args.lanes * 2, args.lanes * args.per_lane_cap)
    slot_bound = sum(work.values()) / concurrency
    host_bound = host_work / cores
    print(f"{len(work)} units ({args.iterations} x the bundled corpus), {args.lanes} process lanes, "
          f"--builder instance-ai, agent answers after log-normal delays (median {args.median_s:g} s, "
          f"sigma {args.sigma:g}, seed {args.seed}); usable concurrency {concurrency} slots on {cores} cores")
    print(f"unit work: {sum(work.values()):.0f} s of slot time ({slot_bound:.1f} s on {concurrency} slots), "
          f"{host_work:.0f} CPU-s ({host_bound:.1f} s on {cores} cores): the {'host' if host_bound > slot_bound else 'slots'} "
          f"bound the schedule")
    print(f"{'policy':>8} {'units':>5} {'makespan s':>10} {'lower bd s':>10} {'ratio':>6} {'idle while waiting s':>20} "
          f"{'slot use':>8} {'CPU-s':>6} {'slot-only ratio':>15}")
    figures: dict[str, tuple[float, float]] = {}
    for policy in policies:
        makespan, ready, count, idle = lane_figures(results[policy])
        lower = ready + max(slot_bound, host_bound)
        figures[policy] = (makespan / lower, total_seconds(idle))
        print(f"{policy:>8} {count:>5} {makespan:>10.1f} {lower:>10.1f} {makespan / lower:>6.3f} "
              f"{total_seconds(idle):>20.1f} {slot_use(results[policy], concurrency, makespan - ready):>8.3f} "
              f"{phase_cpu[policy]:>6.0f} {makespan / (ready + slot_bound):>15.3f}")
    for policy in policies:
        per_lane: dict[str, list[tuple[float, float]]] = defaultdict(list)
        ran = [u for u in results[policy].units if u.lane and u.finished_at >= u.started_at > 0]
        t0 = min(u.started_at for u in ran)
        for u in ran:
            per_lane[u.lane or ""].append((u.started_at - t0, u.finished_at - t0))
        print(f"{policy}: " + ", ".join(
            f"{lane} {len(t)} units {sum(b - a for a, b in t):.0f} s from {min(a for a, _ in t):.0f} s"
            for lane, t in sorted(per_lane.items())))
    if "default" in figures:
        ratio, idle_s = figures["default"]
        print(f"real lanes: {ratio:.3f} (idle while work waited: {idle_s:.1f} s)")


if __name__ == "__main__":
    main()
