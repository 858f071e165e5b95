"""100 kubernetes lanes × 1,000 units against the loopback fake API server: API calls per lane, time
to all-ready, and the orchestrator's peak RSS at two build concurrencies.

The real ``KubernetesBackend`` (real ``kubernetes`` client) drives ``tests/k8s_fake_api.py``, run in
a child process so its threads do not count in the orchestrator's RSS. The fake kubelet makes each
lane pod Ready after 0.5–3 s (hash of its name); ``--pull-fail`` of them first fail their image
pull (ErrImagePull → ImagePullBackOff → Running). A unit is one build *on its lane* — the
build-runner design of docs/cluster.md: the orchestrator only holds an HTTP request per build
(``POST /lanes/<svc>/build`` on the fake, answering after 100–400 ms) — while the pool's health loop
checks every lane every 2 s. Nothing here is a timed test; it prints figures.

    .venv/bin/python bench/k8s_lanes.py [--lanes 100] [--units 1000] [--concurrency 8,200] [--pull-fail 0.1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

SERVER = """
import hashlib, sys, time
sys.path.insert(0, {tests!r})
from k8s_fake_api import FakeApiServer
pull_fail = float(sys.argv[1])
def plan(name):
    h = int(hashlib.sha256(name.encode()).hexdigest()[:8], 16)
    ready_after = 0.5 + (h % 1000) / 400            # 0.5 … 3.0 s
    if (h >> 12) % 1000 < pull_fail * 1000:
        return ((0.2, "ErrImagePull"), (0.5, "ImagePullBackOff"), (ready_after, "ready"))
    return ((ready_after, "ready"),)
with FakeApiServer() as srv:
    srv.state.plan_for = plan
    print(srv.url, flush=True)
    sys.stdin.read()   # until the parent closes stdin
    reqs = srv.state.requests
    api = [r for r in reqs if not r.path.startswith("/lanes/")]
    import json
    kinds = {{}}
    for r in api:
        parts = r.path.split("/")
        res = next((p for p in ("pods", "services", "networkpolicies", "secrets", "jobs") if p in parts), "?")
        verb = "watch" if r.is_watch else {{"POST": "create", "DELETE": "delete"}}.get(r.method, "get" if parts[-1] != res else "list")
        key = verb + " " + res
        kinds[key] = kinds.get(key, 0) + 1
    print(json.dumps({{"api": len(api), "lane_http": len(reqs) - len(api), "kinds": kinds}}), flush=True)
"""


class RssSampler:
    """Peak VmRSS of this process, sampled every 20 ms, per named phase."""

    def __init__(self) -> None:
        self.peaks: Counter[str] = Counter()
        self.phase = "start"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def rss_mib() -> float:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peaks[self.phase] = max(self.peaks[self.phase], int(self.rss_mib()))

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


async def one_run(lanes: int, units: int, concurrency: int, per_lane: int, pull_fail: float) -> dict[str, object]:
    from orchestrator.lanes.kubernetes_lanes import KubernetesBackend
    from orchestrator.lanes.model import LaneSpec
    from orchestrator.ledger import Ledger

    proc = subprocess.Popen([sys.executable, "-c", SERVER.format(tests=str(REPO / "tests")), str(pull_fail)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdin is not None
    url = proc.stdout.readline().strip()
    from kubernetes import client

    cfg = client.Configuration()
    cfg.host = url
    cfg.connection_pool_maxsize = 32
    state = Path(tempfile.mkdtemp(prefix="k8s-bench-"))
    run_id = f"bench-{lanes}x{units}-c{concurrency}"
    env = {"POD_NAME": "orch", "POD_NAMESPACE": "evals", "POD_UID": "00000000-0000-4000-8000-000000000000"}
    backend = KubernetesBackend(run_id, Ledger.for_run(run_id, state), state, api_client=client.ApiClient(cfg),
                                environ=env, namespace="evals", url_template=url + "/lanes/{service}",
                                existing_secret="n8n-eval-keys")
    spec = LaneSpec(n8n_version="2.41.1", image="registry.invalid/n8n-eval-lane:2.41.1",
                    secret_env={"ANTHROPIC_API_KEY": "x"})
    rng = random.Random(7)
    out: dict[str, object] = {"lanes": lanes, "units": units, "concurrency": concurrency}
    with RssSampler() as rss:
        rss.phase = "bring-up"
        t0 = time.monotonic()
        create = asyncio.Semaphore(20)

        async def start(i: int):
            async with create:
                lane = await backend.start_lane(i, spec)
            await backend.wait_ready(lane, 60)
            return lane, time.monotonic() - t0

        started = await asyncio.gather(*(start(i) for i in range(lanes)))
        pool = [lane for lane, _ in started]
        out["all_ready_s"] = round(time.monotonic() - t0, 2)
        out["first_ready_s"] = round(min(t for _, t in started), 2)

        rss.phase = "builds"
        stop = asyncio.Event()

        async def health_loop() -> None:
            while not stop.is_set():
                await asyncio.gather(*(backend.health(lane) for lane in pool))
                try:
                    await asyncio.wait_for(stop.wait(), 2.0)
                except TimeoutError:
                    pass

        cap = asyncio.Semaphore(concurrency)
        lane_caps = {lane.lane_id: asyncio.Semaphore(per_lane) for lane in pool}
        done = 0
        async with httpx.AsyncClient(timeout=30, trust_env=False,
                                     limits=httpx.Limits(max_connections=concurrency + 8)) as http:
            async def unit(n: int) -> None:
                nonlocal done
                lane = pool[n % len(pool)]
                async with cap, lane_caps[lane.lane_id]:
                    r = await http.post(f"{lane.base_url}/build", json={"ms": rng.randint(100, 400)})
                    r.raise_for_status()
                done += 1

            health = asyncio.create_task(health_loop())
            t1 = time.monotonic()
            await asyncio.gather(*(unit(n) for n in range(units)))
            out["units_s"] = round(time.monotonic() - t1, 2)
            stop.set()
            await health
        rss.phase = "teardown"
        t2 = time.monotonic()
        gate = asyncio.Semaphore(20)

        async def down(lane) -> None:
            async with gate:
                await backend.teardown(lane)

        await asyncio.gather(*(down(lane) for lane in pool))
        out["teardown_s"] = round(time.monotonic() - t2, 2)
        await backend.close()
    proc.stdin.close()
    stats = json.loads(proc.stdout.readline())
    proc.wait(timeout=30)
    out["units_done"] = done
    out["api_calls"] = stats["api"]
    out["api_calls_per_lane"] = round(stats["api"] / lanes, 2)
    out["api_calls_by_kind"] = stats["kinds"]
    out["lane_http_requests"] = stats["lane_http"]
    out["peak_rss_mib"] = dict(rss.peaks)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lanes", type=int, default=100)
    parser.add_argument("--units", type=int, default=1000)
    parser.add_argument("--concurrency", default="8,200", help="comma-separated global build caps, one run each")
    parser.add_argument("--per-lane-builds", type=int, default=4)
    parser.add_argument("--pull-fail", type=float, default=0.1, help="fraction of pods whose first pulls fail")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    caps = [int(c) for c in args.concurrency.split(",")]
    if args.one or len(caps) == 1:
        result = asyncio.run(one_run(args.lanes, args.units, caps[0], args.per_lane_builds, args.pull_fail))
        print(json.dumps(result))
        return
    for cap in caps:  # a fresh process per cap: peak RSS is per process
        cmd = [sys.executable, __file__, "--one", "--lanes", str(args.lanes), "--units", str(args.units),
               "--concurrency", str(cap), "--per-lane-builds", str(args.per_lane_builds),
               "--pull-fail", str(args.pull_fail)]
        res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=REPO,
                                        env=dict(os.environ)).stdout.strip().splitlines()[-1])
        rss = res["peak_rss_mib"]
        print(f"lanes={res['lanes']} units={res['units_done']}/{res['units']} concurrency={cap}: "
              f"all ready {res['all_ready_s']} s (first {res['first_ready_s']} s), units {res['units_s']} s, "
              f"teardown {res['teardown_s']} s; API calls {res['api_calls']} = {res['api_calls_per_lane']}/lane "
              f"{res['api_calls_by_kind']}; peak RSS MiB bring-up {rss.get('bring-up')} builds {rss.get('builds')} "
              f"teardown {rss.get('teardown')}")


if __name__ == "__main__":
    main()
