"""Kubernetes lanes through the real provision path against a harsh loopback fake API server: time
to all-ready, API calls per lane, peak concurrent creates; optionally builds on the lanes and the
orchestrator's peak RSS.

The run's own code does the work: ``run.provision.Provisioner`` (every lane through
``lanes.bringup.bring_up_one``: start → readiness → owner seed → fingerprint → ``BuildLane``) on the
real ``KubernetesBackend`` with its default limits (client-side QPS/burst, bounded concurrent
creates, its worker pool) — nothing here throttles or paces anything. ``tests/support/k8s_fake_api.py`` runs
in a child process (its threads do not count in the RSS) and is made harsh: every API answer waits
``--latency`` (uniform, ms), ``--rate-429`` of them answer 429 (``Retry-After: 1``) and ``--rate-5xx``
answer 500/503/504; its kubelet makes each pod Ready after 0.5–3 s (hash of its name) and
``--pull-fail`` of them first fail their image pull for 0.7 s (healed within the pull grace). The lane
side answers what bring-up asks of n8n (reset, login; no editor).

With ``--units N``, N builds then run on the lanes (the build-runner design of docs/cluster.md: one
HTTP request per build, ``POST /lanes/<pod>/build`` answering after 100–400 ms) while the health
loop checks every lane every 2 s, and the peak RSS per phase is printed. Nothing here is a timed
test; it prints figures. The last line of each run::

    N lanes: ready S s, C API calls per lane, P peak concurrent creates (limit L)

    .venv/bin/python bench/k8s_lanes.py [--lanes 100,500] [--latency 5,40] [--rate-429 0.02] [--rate-5xx 0.02]
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
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]

SERVER = """
import hashlib, json, resource, sys
sys.path.insert(0, {tests!r})
from support.k8s_fake_api import FakeApiServer
pull_fail, lo, hi, r429, r5xx = (float(a) for a in sys.argv[1:6])
def plan(name):
    h = int(hashlib.sha256(name.encode()).hexdigest()[:8], 16)
    ready_after = 0.5 + (h % 1000) / 400            # 0.5 … 3.0 s
    if (h >> 12) % 1000 < pull_fail * 1000:
        return ((0.2, "ErrImagePull"), (0.5, "ImagePullBackOff"), (ready_after, "ready"))
    return ((ready_after, "ready"),)
with FakeApiServer() as srv:
    st = srv.state
    st.plan_for = plan
    st.latency_s = (lo / 1000, hi / 1000)
    st.throttle_rate, st.retry_after, st.error_rate = r429, "1", r5xx
    print(srv.url, flush=True)
    sys.stdin.read()   # until the parent closes stdin
    reqs = st.requests
    api = [r for r in reqs if not r.path.startswith("/lanes/")]
    kinds = {{}}
    for r in api:
        parts = r.path.split("/")
        res = next((p for p in ("pods", "services", "networkpolicies", "secrets", "leases") if p in parts), "?")
        verb = "watch" if r.is_watch else {{"POST": "create", "DELETE": "delete", "PATCH": "patch"}}.get(
            r.method, "get" if parts[-1] != res else "list")
        kinds[verb + " " + res] = kinds.get(verb + " " + res, 0) + 1
    print(json.dumps({{"api": len(api), "lane_http": len(reqs) - len(api), "kinds": kinds,
                      "throttled": st.throttled, "errors": st.errors_sent,
                      "peak_creates": st.peak_inflight.get(("POST", "pods"), 0),
                      "cpu_s": round(sum(resource.getrusage(resource.RUSAGE_SELF)[:2]), 1)}}), flush=True)
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


class NoPreparation:
    """The builder seen by the provisioner: nothing to prepare per lane (builds here are plain HTTP)."""

    async def prepare_lane(self, ctx: Any) -> None:
        return None


async def one_run(args: argparse.Namespace, lanes: int) -> dict[str, Any]:
    from kubernetes import client
    from rich.console import Console

    from orchestrator.lanes.bringup import teardown_pool
    from orchestrator.lanes.kubernetes.backend import KubernetesBackend
    from orchestrator.lanes.model import LaneSpec
    from orchestrator.ledger import Ledger
    from orchestrator.run.config import RunConfig
    from orchestrator.run.observers import RunObserver
    from orchestrator.run.provision import Pool, Provisioner

    lo, hi = (float(x) for x in args.latency.split(","))
    proc = subprocess.Popen([sys.executable, "-c", SERVER.format(tests=str(REPO / "tests")), str(args.pull_fail),
                             str(lo), str(hi), str(args.rate_429), str(args.rate_5xx)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdin is not None
    url = proc.stdout.readline().strip()
    state = Path(tempfile.mkdtemp(prefix="k8s-bench-"))
    run_id = f"bench-{lanes}-{os.getpid()}"
    env = {"POD_NAME": "orch", "POD_NAMESPACE": "evals", "POD_UID": "00000000-0000-4000-8000-000000000000"}
    ledger = Ledger.for_run(run_id, state)
    cfg_k8s = client.Configuration()
    cfg_k8s.host = url
    options: dict[str, Any] = {"namespace": "evals", "url_template": url + "/lanes/{pod}",
                               "existing_secret": "n8n-eval-keys"}
    from orchestrator.lanes.kubernetes.options import KubernetesOptions

    defaults = KubernetesOptions.model_validate({})
    cfg_k8s.connection_pool_maxsize = defaults.api_workers  # what load_api_client does in a cluster
    backend = KubernetesBackend(run_id, ledger, state, api_client=client.ApiClient(cfg_k8s), environ=env, **options)
    spec = LaneSpec(n8n_version="2.41.1", image="registry.invalid/n8n-eval-lane:2.41.1", ready_timeout_s=120)
    cfg = RunConfig(lanes=lanes, lane_retries=1, password="Bench-password-1")
    pool = Pool()
    provisioner = Provisioner(cfg, run_id, ledger, backend, spec, NoPreparation(), pool,  # type: ignore[arg-type]
                              RunObserver(), Console(quiet=True))
    out: dict[str, Any] = {"lanes": lanes, "limit": defaults.max_concurrent_creates, "qps": defaults.qps,
                           "burst": defaults.burst}
    # the client's API modules import lazily and slowly (seconds on a busy machine): once per process,
    # not per run — paid before the clock starts
    _ = (client.CoreV1Api, client.NetworkingV1Api, client.CoordinationV1Api, client.V1DeleteOptions)
    import resource

    with RssSampler() as rss:
        rss.phase = "bring-up"
        cpu0 = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
        t0 = time.monotonic()
        await provisioner.start(lanes)
        out["first_ready_s"] = round(time.monotonic() - t0, 2)
        while len(pool.contexts) + len(provisioner.failures) < lanes:
            await asyncio.sleep(0.05)
        out["all_ready_s"] = round(time.monotonic() - t0, 2)
        out["orchestrator_cpu_s"] = round(sum(resource.getrusage(resource.RUSAGE_SELF)[:2]) - cpu0, 1)
        out["ready"] = len(pool.contexts)
        out["failures"] = provisioner.failures[:3]
        ready = list(pool.lanes.values())
        if args.units:
            rss.phase = "builds"
            out.update(await builds(args, backend, ready))
        rss.phase = "teardown"
        t2 = time.monotonic()
        for ctx in list(pool.contexts.values()):
            await ctx.close()
        await teardown_pool(backend, ready)
        out["teardown_s"] = round(time.monotonic() - t2, 2)
        await provisioner.close()
        await backend.close()
    out["limiter_wait_s"] = round(backend.limiter.waited_s, 1)
    proc.stdin.close()
    stats = json.loads(proc.stdout.readline())
    proc.wait(timeout=30)
    out["api_calls"] = stats["api"]
    out["api_calls_per_lane"] = round(stats["api"] / lanes, 2)
    out["api_calls_by_kind"] = stats["kinds"]
    out["injected_429"], out["injected_5xx"] = stats["throttled"], stats["errors"]
    out["peak_concurrent_creates"] = stats["peak_creates"]
    out["lane_http_requests"] = stats["lane_http"]
    out["fake_cpu_s"] = stats["cpu_s"]
    out["peak_rss_mib"] = dict(rss.peaks)
    return out


async def builds(args: argparse.Namespace, backend: Any, pool: list[Any]) -> dict[str, Any]:
    rng = random.Random(7)
    stop = asyncio.Event()

    async def health_loop() -> None:
        while not stop.is_set():
            await asyncio.gather(*(backend.health(lane) for lane in pool))
            try:
                await asyncio.wait_for(stop.wait(), 2.0)
            except TimeoutError:
                pass

    cap = asyncio.Semaphore(args.concurrency)
    lane_caps = {lane.lane_id: asyncio.Semaphore(args.per_lane_builds) for lane in pool}
    done = 0
    async with httpx.AsyncClient(timeout=30, trust_env=False,
                                 limits=httpx.Limits(max_connections=args.concurrency + 8)) as http:
        async def unit(n: int) -> None:
            nonlocal done
            lane = pool[n % len(pool)]
            async with cap, lane_caps[lane.lane_id]:
                r = await http.post(f"{lane.base_url}/build", json={"ms": rng.randint(100, 400)})
                r.raise_for_status()
            done += 1

        health = asyncio.create_task(health_loop())
        t1 = time.monotonic()
        await asyncio.gather(*(unit(n) for n in range(args.units)))
        units_s = round(time.monotonic() - t1, 2)
        stop.set()
        await health
    return {"units_done": done, "units_s": units_s}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lanes", default="100,500", help="comma-separated pool sizes, one run each")
    parser.add_argument("--latency", default="5,40", help="API answer delay range, ms")
    parser.add_argument("--rate-429", type=float, default=0.02, help="fraction of API requests answering 429")
    parser.add_argument("--rate-5xx", type=float, default=0.02, help="fraction of API requests answering 5xx")
    parser.add_argument("--pull-fail", type=float, default=0.1, help="fraction of pods whose first pulls fail")
    parser.add_argument("--units", type=int, default=0, help="builds to run on the lanes (0: bring-up only)")
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--per-lane-builds", type=int, default=4)
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [int(n) for n in args.lanes.split(",")]
    if args.one:
        print(json.dumps(asyncio.run(one_run(args, sizes[0]))))
        return
    for n in sizes:  # a fresh process per size: peak RSS is per process
        cmd = [sys.executable, __file__, "--one", "--lanes", str(n), "--latency", args.latency,
               "--rate-429", str(args.rate_429), "--rate-5xx", str(args.rate_5xx), "--pull-fail", str(args.pull_fail),
               "--units", str(args.units), "--concurrency", str(args.concurrency),
               "--per-lane-builds", str(args.per_lane_builds)]
        res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=REPO,
                                        env=dict(os.environ)).stdout.strip().splitlines()[-1])
        rss = res["peak_rss_mib"]
        print(f"{n} lanes: {res['ready']} ready (first {res['first_ready_s']} s), teardown {res['teardown_s']} s; "
              f"API calls {res['api_calls']} {res['api_calls_by_kind']}; injected 429s {res['injected_429']}, "
              f"5xx {res['injected_5xx']}; limiter waited {res['limiter_wait_s']} s (qps {res['qps']}, "
              f"burst {res['burst']}); peak RSS MiB {rss}; CPU s: orchestrator bring-up "
              f"{res['orchestrator_cpu_s']}, fake API + lanes (whole run) {res['fake_cpu_s']}" + (f"; {res['units_done']} units in {res['units_s']} s"
                                                               if args.units else ""))
        if res["failures"]:
            print(f"  failures (first 3): {res['failures']}")
        print(f"{n} lanes: ready {res['all_ready_s']} s, {res['api_calls_per_lane']} API calls per lane, "
              f"{res['peak_concurrent_creates']} peak concurrent creates (limit {res['limit']})", flush=True)


if __name__ == "__main__":
    main()
