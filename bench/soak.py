"""Soak: many scripted units over real process lanes with injected faults, then count what was
lost and what leaked.

The run is the real pipeline in this process (``Run(await prepare(cfg)).execute()``): real n8n lanes, the real
claude CLI, verification on the lanes; the model is the scripted loopback server, which injects a
fault into ``--fault-rate`` of the builds (at their first request: claude printing no trailer, a
529 overload, a malformed answer). ``--lane-kills`` lanes are SIGKILLed while units run (evenly
spread over the run; never the last live lane). Units come from a generated case folder: copies
of the smoke cases under distinct slugs (a lane runs one build per slug at a time) × iterations.

Prints: units completed / lost (planned but with no result: must be 0) / recorded twice (must be
0), leaked resources (open ledger entries + processes labelled with the run id + lane folders +
staged claude dirs: must be 0), the orchestrator's peak RSS (``ru_maxrss`` of this process; the
scripted model runs in a child process and lanes and claude are their own processes, so none of
them is counted), wall time, its own CPU seconds per unit, and the status mix. Exit 1 when
anything was lost, recorded twice or leaked.

    .venv/bin/python bench/soak.py [--units 500] [--lanes 4] [--iterations 10] [--concurrency 8]
                                   [--fault-rate 0.05] [--lane-kills 1] [--seed 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import resource
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from orchestrator.lanes.model import LaneState
from orchestrator.lanes.process.backend import labelled_processes
from orchestrator.ledger import Ledger
from orchestrator.run.config import RunConfig
from orchestrator.run.pipeline import Run
from orchestrator.run.resolve import prepare
from orchestrator.scripted import scripts as ms
from orchestrator.scripted.replies import Action, HttpError, Malformed, text_reply
from orchestrator.scripted.server import ScriptedModelServer

REPO = Path(__file__).resolve().parents[1]
SMOKE = sorted(p for p in (REPO / "cases").glob("smoke-*.json"))
FAKE_KEY = "sk-ant-soak-fake-key-000000000000"
FAULTS = ("no_trailer", "overloaded_529", "malformed")


class FaultyBuilder:
    """The MCP builder, with a fault at the first request of ``rate`` of the builds."""

    def __init__(self, rate: float, seed: int) -> None:
        self.rate = rate
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.injected: Counter[str] = Counter()
        self.builds = 0
        self.inner = ms.mcp_builder()

    def __call__(self, request: dict[str, Any]) -> Action:
        first = not any(m.get("role") == "assistant" for m in request.get("messages") or [])
        fault = None
        if first:
            with self.lock:
                self.builds += 1
                fault = self.rng.choice(FAULTS) if self.rng.random() < self.rate else None
                if fault:
                    self.injected[fault] += 1
        if fault == "no_trailer":
            return text_reply("I looked at it and decided not to build anything.")
        if fault == "overloaded_529":
            return HttpError(529)
        if fault == "malformed":
            return Malformed()
        return self.inner(request)


class _Unrecorded(ScriptedModelServer):
    """A soak sends thousands of large requests: keep none of them."""

    def _record(self, rec: object) -> None:
        return


def _serve_model(rate: float, seed: int, conn: Connection) -> None:
    """Child process: the scripted model, so its memory and CPU are not counted as the orchestrator's."""
    builder = FaultyBuilder(rate, seed)
    server = _Unrecorded(ms.demo_script(builder=builder)).start()
    conn.send(server.base_url)
    conn.recv()  # until the parent says stop
    server.stop()
    conn.send((dict(builder.injected), builder.builds))


def make_cases(folder: Path, units: int, iterations: int) -> int:
    """Write ``units / iterations`` cases (copies of the smoke cases); return how many."""
    count = max(1, -(-units // iterations))
    folder.mkdir(parents=True)
    for i in range(count):
        src = SMOKE[i % len(SMOKE)]
        shutil.copy(src, folder / f"soak-{i:03d}-{src.name}")
    return count


async def kill_lanes(run: Run, kills: int, planned: int, units_path: Path, done: asyncio.Event) -> list[str]:
    """SIGKILL one lane's n8n at each of ``kills`` evenly spaced points of the run's progress."""
    killed: list[str] = []
    marks = [planned * (k + 1) // (kills + 1) for k in range(kills)]
    while marks and not done.is_set():
        await asyncio.sleep(1.0)
        finished = sum(1 for _ in units_path.open()) if units_path.exists() else 0
        live = [lane for lane in run.lanes.values() if lane.state == LaneState.ready]
        if finished >= marks[0] and len(live) > 1:
            victim = live[-1]
            os.kill(int(victim.handle), signal.SIGKILL)
            killed.append(f"{victim.lane_id} at {finished}/{planned} units")
            marks.pop(0)
    return killed


def leaks(run_id: str, state: Path) -> list[str]:
    run_dir = state / "runs" / run_id
    found = [f"open {e.kind} {e.id}" for e in Ledger(run_dir).open_entries()]
    found += [f"process {pid}" for pid in labelled_processes(run_id)]
    for sub in ("lanes", "builds"):
        if (run_dir / sub).is_dir():
            found += [f"{sub}/{p.name}" for p in (run_dir / sub).iterdir()]
    return found


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--units", type=int, default=500)
    parser.add_argument("--lanes", type=int, default=4)
    parser.add_argument("--iterations", type=int, default=10, help="iterations per generated case")
    parser.add_argument("--concurrency", type=int, default=8, help="global cap on concurrent builds")
    parser.add_argument("--per-lane-builds", type=int, default=4)
    parser.add_argument("--fault-rate", type=float, default=0.05)
    parser.add_argument("--lane-kills", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the temp folder (results, ledger)")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="soak-"))
    parent_end, child_end = multiprocessing.Pipe()
    model = multiprocessing.get_context("fork").Process(target=_serve_model, args=(args.fault_rate, args.seed, child_end),
                                                        name="soak-model", daemon=True)
    model.start()
    base_url = parent_end.recv()
    os.environ |= {"ANTHROPIC_API_KEY": FAKE_KEY, "ANTHROPIC_BASE_URL": base_url,
                   "N8N_INSTANCE_AI_MODEL_URL": base_url, "N8N_INSTANCE_AI_MODEL_API_KEY": "soak-lane-key-0"}
    iterations = min(args.iterations, args.units)
    cases = make_cases(tmp / "cases", args.units, iterations)
    planned = cases * iterations
    run_id = f"soak-{time.strftime('%H%M%S')}-{os.urandom(2).hex()}"
    cfg = RunConfig(
        cases_paths=[tmp / "cases"], iterations=iterations, lanes=args.lanes, concurrency=args.concurrency,
        per_lane_builds=args.per_lane_builds, model_server="real", state_dir=tmp / "state", output_dir=tmp / "out",
        run_id=run_id, outage_waits_s=(0.5, 0.5), build_max_retries=0, build_timeout_ms=300_000, seed=args.seed,
    )
    print(f"soak {run_id}: {cases} cases × {iterations} = {planned} units on {args.lanes} lanes, "
          f"concurrency {args.concurrency}, fault rate {args.fault_rate:.0%}, {args.lane_kills} lane kill(s)",
          file=sys.stderr)
    run = Run(await prepare(cfg))
    done = asyncio.Event()
    units_path = cfg.state_dir / "runs" / run_id / "units.jsonl"
    t0 = time.monotonic()
    killer = asyncio.create_task(kill_lanes(run, args.lane_kills, planned, units_path, done))
    try:
        outcome = await run.execute()
    finally:
        done.set()
        killed = await killer
        parent_end.send("stop")
        injected, attempts = parent_end.recv()
        model.join(10)
    wall = time.monotonic() - t0

    assert cfg.output_dir is not None  # the plan set it
    units = json.loads((cfg.output_dir / "eval-results.json").read_text())["orchestrator"]["units"]
    recorded = {(u["case"], u["iteration"]) for u in units}
    statuses = Counter(u["build"]["status"] for u in units)
    completed = sum(n for s, n in statuses.items() if s != "skipped")
    lost = planned - len(recorded)
    twice = len(units) - len(recorded)  # a unit recorded more than once (run again after it finished)
    leaked = leaks(run_id, cfg.state_dir)
    print(f"units planned      {planned}")
    print(f"units completed    {completed}  ({', '.join(f'{s} {n}' for s, n in statuses.most_common())})")
    print(f"units lost         {lost}")
    print(f"recorded twice     {twice}")
    print(f"leaked resources   {len(leaked)}" + (f"  {leaked[:10]}" if leaked else ""))
    own = resource.getrusage(resource.RUSAGE_SELF)
    print(f"peak RSS           {peak_rss_mib():.0f} MiB (orchestrator process)")
    print(f"orchestrator CPU   {own.ru_utime + own.ru_stime:.0f} s ({(own.ru_utime + own.ru_stime) / planned:.3f} s per unit)")
    print(f"wall time          {wall:.0f} s ({planned / wall * 60:.1f} units/min)")
    print(f"faults injected    {injected} over {attempts} claude attempts; lanes killed: {killed}")
    print(f"run errors         {outcome.errors or 'none'}; cleanup failures {len(outcome.cleanup_failures)}")
    if args.keep:
        print(f"kept {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if lost or twice or leaked else 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
