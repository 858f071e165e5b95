"""Bench: the embedded sandbox service's costs, on the real service with bubblewrap jails.

Figures (median of ``--rounds``):

* service start (child process until ``/healthz`` answers);
* sandbox create (``POST /sandboxes``: workspace, template mount points, cgroups);
* a trivial command (``true``) through ``POST /executions`` until its ``exit`` event;
* the builder's ``npm install --ignore-scripts --no-audit --no-fund --prefer-online`` in a
  workspace holding n8n's ``package.json``, offline against the read-only template;
* ``node --import tsx`` of a one-node SDK workflow (what ``build-workflow`` runs);
* sandbox delete; service stop.

Run: ``.venv/bin/python bench/sandbox_service.py [--rounds N]`` (needs the installed n8n and bwrap).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from orchestrator.sandbox import SandboxService
from orchestrator.sandbox.template import ensure_template
from orchestrator.toolchain import Toolchain, default_cache_dir

WF = (
    "import { workflow, trigger } from '@n8n/workflow-sdk';\n"
    "export default workflow('w1', 'bench').add(trigger({ type: 'n8n-nodes-base.manualTrigger', version: 1,"
    " config: { name: 'Start' } }));\n"
)
BUILD = "const m = await import(process.argv[2]); console.log(JSON.stringify(m.default.toJSON()));\n"


async def _exec(http: httpx.AsyncClient, sid: str, command: str, workdir: str = "/home/user/workspace") -> dict[str, Any]:
    resp = await http.post(f"/sandboxes/{sid}/executions", json={"command": command, "workdir": workdir,
                                                                 "timeout_ms": 120_000})
    events = [json.loads(line) for line in resp.text.splitlines() if line]
    exit_event: dict[str, Any] = events[-1]  # the service's last line: {"exit_code": ...}
    if exit_event.get("exit_code") != 0:
        out = "".join(e.get("data", "") for e in events)
        raise RuntimeError(f"{command!r} failed: {exit_event} {out[-500:]}")
    return exit_event


async def main(rounds: int) -> None:
    tc = Toolchain(default_cache_dir())
    t0 = time.perf_counter()
    template = ensure_template(tc)
    print(f"template ready (prepared or reused): {time.perf_counter() - t0:.2f} s  ({template.root})")
    pkg = (template.root / "package.json").read_bytes()
    figures: dict[str, list[float]] = {}

    def note(name: str, seconds: float) -> None:
        figures.setdefault(name, []).append(seconds)

    with tempfile.TemporaryDirectory(prefix="sandbox-bench-") as tmp:
        for _ in range(rounds):
            svc = SandboxService(Path(tmp) / "sb", tc, template=template)
            t = time.perf_counter()
            await svc.start()
            note("service start", time.perf_counter() - t)
            async with httpx.AsyncClient(base_url=svc.url, headers={"X-Api-Key": svc.api_key}, timeout=180) as http:
                t = time.perf_counter()
                sid = (await http.post("/sandboxes", json={})).json()["id"]
                note("sandbox create", time.perf_counter() - t)
                t = time.perf_counter()
                await _exec(http, sid, "true")
                note("exec `true`", time.perf_counter() - t)
                await http.put(f"/sandboxes/{sid}/files", params={"path": "/home/user/workspace/package.json"},
                               content=pkg)
                t = time.perf_counter()
                await _exec(http, sid, "npm install --ignore-scripts --no-audit --no-fund --prefer-online")
                note("npm install (template, offline)", time.perf_counter() - t)
                await http.put(f"/sandboxes/{sid}/files", params={"path": "/home/user/workspace/src/workflow.ts"},
                               content=WF.encode())
                await http.put(f"/sandboxes/{sid}/files", params={"path": "/home/user/workspace/build.mjs"},
                               content=BUILD.encode())
                t = time.perf_counter()
                await _exec(http, sid, "node --import tsx build.mjs ./src/workflow.ts")
                note("node --import tsx build", time.perf_counter() - t)
                t = time.perf_counter()
                await http.delete(f"/sandboxes/{sid}")
                note("sandbox delete", time.perf_counter() - t)
            t = time.perf_counter()
            await svc.stop()
            note("service stop", time.perf_counter() - t)
    for name, values in figures.items():
        print(f"{name:34s} median {statistics.median(values):6.3f} s  (min {min(values):.3f}, max {max(values):.3f})")
    setup = sum(statistics.median(figures[k]) for k in ("sandbox create", "npm install (template, offline)"))
    print(f"sandbox ready for a build: {setup:.2f} s per thread")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    asyncio.run(main(parser.parse_args().rounds))
