"""Bench: where the memory of concurrent MCP builds goes with ``--builder remote``.

A build runner (``python -m orchestrator.builders.claude.build_runner serve``) runs as its own process — the
lane pod's ``build-runner`` container — with the real claude CLI against the scripted model server,
which holds every model request ``--hold`` seconds before answering with a ``WORKFLOW_ID=`` trailer.
This process plays the orchestrator: it sends N builds at once with :class:`RemoteBuildRunner` and
samples, every 0.1 s, its own RSS and the summed RSS of the runner's process tree (the runner plus
its claude processes). No n8n is needed: the MCP URL is a closed loopback port (claude reports the
server as failed and answers anyway), so the figures are claude's, not a lane's.

Run: ``.venv/bin/python bench/remote_builds.py [--concurrency 1,2,4] [--hold 8]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from orchestrator.builders.claude.build_runner import RemoteBuildRunner
from orchestrator.scripted.replies import text_reply
from orchestrator.scripted.server import ScriptedModelServer
from orchestrator.toolchain import Toolchain, default_cache_dir


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _tree(root: int) -> list[int]:
    parents: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                parents[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    out, frontier = [root], [root]
    while frontier:
        frontier = [p for p, pp in parents.items() if pp in frontier]
        out += frontier
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def one_round(url: str, runner_pid: int, n: int) -> dict[str, Any]:
    peak_self, peak_tree, stop = _rss_kib(os.getpid()), 0, asyncio.Event()

    async def sample() -> None:
        nonlocal peak_self, peak_tree
        while not stop.is_set():
            peak_self = max(peak_self, _rss_kib(os.getpid()))
            peak_tree = max(peak_tree, sum(_rss_kib(p) for p in _tree(runner_pid)))
            await asyncio.sleep(0.1)

    base_self = _rss_kib(os.getpid())
    sampler = asyncio.ensure_future(sample())
    remote = RemoteBuildRunner(url, poll_s=5)
    started = time.monotonic()
    try:
        results = await asyncio.gather(*(remote.run(f"bench-{n}-{i}-{time.time_ns()}", "Build a workflow.",
                                                    "mcp-key-bench-0000", timeout_ms=300_000) for i in range(n)))
    finally:
        stop.set()
        await sampler
        await remote.aclose()
    return {"n": n, "ok": sum(1 for r in results if r.workflow_id), "wall_s": time.monotonic() - started,
            "self_base_mib": base_self / 1024, "self_peak_mib": peak_self / 1024, "runner_tree_peak_mib": peak_tree / 1024}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--concurrency", default="1,2,4")
    parser.add_argument("--hold", type=float, default=8.0, help="seconds the model holds each request")
    args = parser.parse_args()
    levels = [int(x) for x in args.concurrency.split(",")]
    tc = Toolchain(default_cache_dir())
    if not tc.claude_ready():
        print("claude CLI not installed (orchestrator lanes install)")
        return 2

    def script(request: dict[str, Any]) -> Any:
        time.sleep(args.hold)
        return text_reply("Built.\nWORKFLOW_ID=bench-1")

    with ScriptedModelServer(script) as model, tempfile.TemporaryDirectory() as tmp:
        port = _free_port()
        env = {**os.environ, "ANTHROPIC_API_KEY": "sk-bench-0000", "ANTHROPIC_BASE_URL": model.base_url}
        proc = subprocess.Popen([sys.executable, "-m", "orchestrator.builders.claude.build_runner", "serve", "--host", "127.0.0.1",
                                 "--port", str(port), "--root", tmp, "--n8n-url", f"http://127.0.0.1:{_free_port()}",
                                 "--slots", str(max(levels))], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        try:
            for _ in range(300):
                try:
                    if httpx.get(f"{url}/healthz", timeout=1, trust_env=False).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.1)
            print(f"runner idle RSS: {_rss_kib(proc.pid) / 1024:.0f} MiB; model holds each request {args.hold:.0f} s")
            print(f"{'builds':>6} {'ok':>3} {'wall s':>7} {'orchestrator RSS MiB (base → peak)':>36} {'runner tree peak MiB':>21}")
            for n in levels:
                r = asyncio.run(one_round(url, proc.pid, n))
                print(f"{r['n']:>6} {r['ok']:>3} {r['wall_s']:>7.1f} {r['self_base_mib']:>24.1f} → {r['self_peak_mib']:<9.1f}"
                      f" {r['runner_tree_peak_mib']:>21.0f}")
        finally:
            os.killpg(proc.pid, 15)
            proc.wait(timeout=20)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
