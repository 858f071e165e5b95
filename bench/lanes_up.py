"""Seconds to bring up 1, 2 and 4 process lanes, ready (``/healthz/readiness``) and seeded (owner
reset + login + fingerprint), along the path from n8n's defaults to the orchestrator's default.
Each pool starts from a new state folder and is torn down after. Per pool: the time until every
lane is ready, until the first lane is ready (when the first build starts: there is no barrier),
the mean lane, and the CPU seconds each lane's processes used until it was ready (the figure that
does not depend on what else the machine runs: on 2 shared cores, wall times follow the load
average, printed beside them).

Variants, each adding to the one before:

- ``fresh``: an empty user folder, n8n's own settings (it runs its ~270 migrations);
- ``template``: the migrated template database, built once per n8n version;
- ``tuned``: Node tuned for the start (``Toolchain.lane_node_env``): the compile cache and the
  module-resolution cache shared per n8n install, a 32 MiB young generation;
- ``headless``: tuned, and no editor (``N8N_DISABLE_UI``: n8n would rewrite its editor bundle
  into the user folder at every start);
- ``lazy-runner``: headless, and the JS task runner starts with the lane's first Code node instead
  of with n8n (``orchestrator.lanes.process.launcher``, n8n's launcher protocol);
- ``default``: the default path: lazy-runner, and staggered starts (lanes after the first start at
  a lower CPU priority until they are ready, so the first one, and the first build, comes early;
  while more lanes start than there are CPUs, each is held to one CPU; as root only).

Then, on one lane of the default path, the price of the lazy runner: how long the first Code node
takes (the runner starts for it) and the second.

The template and both caches are built once before timing (their one-off cost is printed).

    .venv/bin/python bench/lanes_up.py [--counts 1,2,4] [--variants fresh,template,tuned,headless,lazy-runner,default] [--repeat 1]

The last line is ``4 lanes: <seconds> s``, the default path with 4 lanes (mean over repeats).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import tempfile
import time
from pathlib import Path

from orchestrator.lanes.bringup import PoolEvents, bring_up, make_owner, teardown_pool
from orchestrator.lanes.model import Lane
from orchestrator.lanes.pool import make_spec
from orchestrator.lanes.process.backend import ProcessBackend
from orchestrator.ledger import Ledger
from orchestrator.n8n.rest import N8nClient
from orchestrator.procs import group_members
from orchestrator.toolchain import ensure_lane_template


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


#: Manual Trigger → Code: runs without a model (no external call for the mock to answer).
CODE_FLOW = {
    "name": "lanes_up code node",
    "nodes": [
        {"id": "t", "name": "Manual Trigger", "type": "n8n-nodes-base.manualTrigger", "typeVersion": 1,
         "position": [0, 0], "parameters": {}},
        {"id": "c", "name": "Code", "type": "n8n-nodes-base.code", "typeVersion": 2, "position": [200, 0],
         "parameters": {"jsCode": "return [{json: {sum: 1 + 2}}];"}},
    ],
    "connections": {"Manual Trigger": {"main": [[{"node": "Code", "type": "main", "index": 0}]]}},
    "settings": {},
}


async def code_node_seconds(state: Path) -> list[float]:
    """Seconds for a Code node on a fresh default lane: the first (the runner starts), the second."""
    run_id = f"bench-code-{int(time.time())}"
    backend = ProcessBackend(run_id, Ledger.for_run(run_id, state), state)
    owner = make_owner(run_id)
    result = await bring_up(backend, 1, make_spec("eval"), owner)
    seconds: list[float] = []
    try:
        async with N8nClient(result.lanes[0].base_url) as client:
            session = await client.login(owner.email, owner.password)
            workflow_id = await session.create_workflow(CODE_FLOW)
            for _ in range(2):
                t0 = time.monotonic()
                run = await session.execute_with_llm_mock(workflow_id, timeout_ms=60_000)
                seconds.append(time.monotonic() - t0)
                if not run.success:
                    raise SystemExit(f"the Code node failed: {run.errors}")
            await session.aclose()
    finally:
        await teardown_pool(backend, result.lanes)
        await backend.close()
    return seconds


VARIANTS = ("fresh", "template", "tuned", "headless", "lazy-runner", "default")


async def one_pool(count: int, state: Path, variant: str) -> tuple[float, list[float], list[float]]:
    run_id = f"bench-{variant}-{count}-{int(time.time())}"
    backend = ProcessBackend(run_id, Ledger.for_run(run_id, state), state, lane_template=variant != "fresh",
                             node_tuning=variant not in ("fresh", "template"), stagger=variant == "default",
                             lazy_runner=variant in ("lazy-runner", "default"))
    spec = make_spec("eval")
    if variant in ("fresh", "template", "tuned"):
        spec = dataclasses.replace(spec, env={**spec.env, "N8N_DISABLE_UI": "false"})
    per_lane: list[float] = []
    cpu: list[float] = []

    def ready(lane: Lane, _seconds: float) -> None:
        per_lane.append(time.monotonic() - t0)
        cpu.append(group_cpu_s(int(lane.handle)))

    t0 = time.monotonic()
    result = await bring_up(backend, count, spec, make_owner(run_id), events=PoolEvents(lane_ready=ready))
    total = time.monotonic() - t0
    await teardown_pool(backend, result.lanes)
    await backend.close()
    if result.failures:
        raise SystemExit(f"{variant}: {len(result.failures)} lane(s) failed: {result.failures[0]}")
    return total, sorted(per_lane), cpu


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="1,2,4")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=", ".join(VARIANTS))
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
    if not backend.toolchain.resolve_cache.is_file():  # one lane start records it (and warms the compile cache)
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory() as tmp:
            await one_pool(1, Path(tmp), "default")
        print(f"resolution cache: built in {time.monotonic() - t0:.1f} s ({backend.toolchain.resolve_cache})")
    print(f"cpus: {os.cpu_count()}, load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'variant':>14} {'lanes':>5} {'all ready s':>11} {'1st build s':>13} {'mean lane s':>11} "
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
        if "default" in variants:
            first, second = await code_node_seconds(Path(tmp) / "code")
            print(f"a Code node on a fresh default lane: first {first:.1f} s (its task runner starts), "
                  f"then {second:.1f} s")
    default = totals.get(("default", 4))
    if default:
        print(f"4 lanes: {sum(default) / len(default):.1f} s")


if __name__ == "__main__":
    asyncio.run(main())
