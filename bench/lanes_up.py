"""Seconds to bring up 1, 2 and 4 process lanes, ready (``/healthz/readiness``) and seeded (owner
reset + login + fingerprint), from a fresh user folder (n8n runs its ~270 migrations) and from the
migrated template database (the default path). Each pool starts from a new state folder and is
torn down after. Per pool: the time until every lane is ready, until the first lane is ready (when
the first build could start without a barrier), the mean lane, and the CPU seconds each lane's
processes used until it was ready (the figure that does not depend on what else the machine runs:
on 2 shared cores, wall times follow the load average, printed beside them).

The template is built once per n8n version before timing (its one-off cost is printed). Variants:
``fresh``, ``untuned`` (the template without the Node tuning: no shared compile cache, default young
generation) and ``template`` (the default path: template + ``NODE_COMPILE_CACHE`` shared per n8n
version + ``--max-semi-space-size``, see ``Toolchain.lane_node_env``). Measured and dropped:
``N8N_DISABLE_UI=true`` saves ~2.5 CPU-s a lane (n8n compiles its editor's static assets at every
start) but 2.41.1 then registers no FrontendService, so ``GET /rest/settings`` answers 404 and
bring-up's fingerprint needs it.

    .venv/bin/python bench/lanes_up.py [--counts 1,2,4] [--variants fresh,untuned,template] [--repeat 1]

The last line is ``4 lanes: <seconds> s``, the template path with 4 lanes (mean over repeats).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

from orchestrator.lanes.bringup import PoolEvents, bring_up, make_owner, teardown_pool
from orchestrator.lanes.install import ensure_lane_template
from orchestrator.lanes.model import Lane
from orchestrator.lanes.pool import make_spec
from orchestrator.lanes.process import ProcessBackend, group_members
from orchestrator.ledger import Ledger


def group_cpu_s(pgid: int) -> float:
    """CPU seconds used so far by a lane's processes (its n8n and task runner, and the children
    they have already waited for)."""
    ticks = 0
    for pid in group_members(pgid):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    return ticks / os.sysconf("SC_CLK_TCK")


async def one_pool(count: int, state: Path, variant: str) -> tuple[float, list[float], list[float]]:
    run_id = f"bench-{variant}-{count}-{int(time.time())}"
    backend = ProcessBackend(run_id, Ledger.for_run(run_id, state), state, lane_template=variant != "fresh",
                             node_tuning=variant == "template")
    per_lane: list[float] = []
    cpu: list[float] = []

    def ready(lane: Lane, _seconds: float) -> None:
        per_lane.append(time.monotonic() - t0)
        cpu.append(group_cpu_s(int(lane.handle)))

    t0 = time.monotonic()
    result = await bring_up(backend, count, make_spec("eval"), make_owner(run_id), events=PoolEvents(lane_ready=ready))
    total = time.monotonic() - t0
    await teardown_pool(backend, result.lanes)
    await backend.close()
    if result.failures:
        raise SystemExit(f"{variant}: {len(result.failures)} lane(s) failed: {result.failures[0]}")
    return total, sorted(per_lane), cpu


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="1,2,4")
    parser.add_argument("--variants", default="fresh,untuned,template", help="fresh, untuned and/or template")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    counts = [int(c) for c in args.counts.split(",")]

    backend = ProcessBackend("bench-template", Ledger.for_run("bench-template", Path(tempfile.gettempdir())),
                             Path(tempfile.gettempdir()))
    t0 = time.monotonic()
    existed = backend.toolchain.lane_template.is_file()
    await asyncio.to_thread(ensure_lane_template, backend.toolchain, dict(make_spec("eval").env), print)
    await backend.close()
    print(f"template database: {'already built' if existed else f'built in {time.monotonic() - t0:.1f} s'} "
          f"({backend.toolchain.lane_template})")
    print(f"cpus: {os.cpu_count()}, load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'variant':>14} {'lanes':>5} {'all ready s':>11} {'first ready s':>13} {'mean lane s':>11} "
          f"{'CPU s/lane':>10} {'load avg':>8}")

    totals: dict[tuple[str, int], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for count in counts:
            for variant in variants:
                for r in range(args.repeat):
                    total, per_lane, cpu = await one_pool(count, Path(tmp) / f"{variant}-{count}-{r}", variant)
                    totals.setdefault((variant, count), []).append(total)
                    print(f"{variant:>14} {count:>5} {total:>11.1f} {per_lane[0]:>13.1f} "
                          f"{sum(per_lane) / len(per_lane):>11.1f} {sum(cpu) / len(cpu):>10.1f} "
                          f"{os.getloadavg()[0]:>8.2f}", flush=True)
    default = totals.get(("template", 4))
    if default:
        print(f"4 lanes: {sum(default) / len(default):.1f} s")


if __name__ == "__main__":
    asyncio.run(main())
