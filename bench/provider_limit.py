"""Bench: one sweep against a provider with a tokens-per-minute limit, under three concurrency policies.

The sweep: ``--iterations`` of the bundled smoke cases (Instance AI builds with execution scenarios
and expectations) on ``--lanes`` (4) real n8n process lanes, offline, through ``orchestrator run``
in-process. The provider is the embedded scripted model under pressure
(:mod:`orchestrator.scripted.pressure`): every answer takes ``--latency-s`` (as a real model's does),
prompt caching is on, and — after calibration — its tokens-per-minute limit is half of what
lanes × 4 builds use unlimited, in a bucket of ``--burst-s`` seconds.

1. **calibrate**: lanes × 4 concurrent builds, no limit, no gateway: the demand of lanes × 4 builds
   is their count × (counted tokens per unit ÷ mean unit wall time); the limit (TPM) is half of it.
2. the same sweep, three times, with that limit:
   - ``fixed x2``: ``--concurrency lanes × 2`` (n8n's rule), no gateway — lanes, judge and proxy
     call the provider directly, as before issue 37;
   - ``fixed x4``: ``--concurrency lanes × 4`` (each lane's build cap), no gateway;
   - ``gateway``: the model gateway, its rule setting the concurrency (from lanes × 2, up to lanes × 4).

Per policy: **R** = the provider's busy span (its first to its last answer) ÷ the limit's lower bound
(the tokens it counted ÷ TPM): 1.0 is a provider used to its limit all along; **T** = units a
budget ended (a build or scenario timeout); **N** = 429s that reached a build (without the gateway:
every 429 the provider sent; with it: the ones its one retry did not absorb).

**Why the provider, not the CPU, is the bottleneck here** (2 cores, shared): a unit's calls each
wait ``--latency-s`` at the provider while the lane's CPU idles, so a unit is mostly waiting; and the
limit admits only about lanes × 2 builds' worth of tokens, so about that many make progress at once.
The bench prints how busy the machine's cores were during each policy (from ``/proc/stat``, every
process on the machine included) next to each figure: well under 100 % means the CPU had room.

    .venv/bin/python bench/provider_limit.py [--lanes 4] [--iterations 8] [--latency-s 8]
        [--tpm N: skip the calibration] [--policies gateway: a subset, no last line] [--keep DIR]

The last line is ``provider limit: gateway R x bound, timeouts T, 429s reaching a build N (fixed x2
R2, fixed x4 R4 / T4)``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.domain import Attribution, BuildStatus
from orchestrator.results.model import UnitResult
from orchestrator.run.config import RunConfig
from orchestrator.run.pipeline import Run
from orchestrator.run.resolve import prepare
from orchestrator.scripted.pressure import PRESSURE_ENV

CASES = Path(__file__).resolve().parents[1] / "cases"


def cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of every core since boot."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


@dataclass
class Outcome:
    name: str
    units: list[UnitResult]
    provider: dict[str, Any]
    gateway: dict[str, Any] | None
    wall_s: float
    cpu_busy: float

    def ratio(self, tpm: float) -> float:
        bound = self.provider["counted_tokens"] / (tpm / 60.0)
        return self.provider["answer_span_s"] / bound if bound else float("nan")

    @property
    def timeouts(self) -> int:
        return sum(1 for u in self.units if u.build.status is BuildStatus.timeout or u.build.timeout is not None
                   or u.attribution is Attribution.timeout
                   or any("time budget" in (s.root_cause or "") or "timed out" in s.reason for s in u.scenarios))

    @property
    def rate_limited_to_builds(self) -> int:
        if self.gateway is not None:
            return int((self.gateway.get("failed_to_caller") or {}).get("rate_limited", 0))
        return int(self.provider["rate_limited"])

    @property
    def outages(self) -> int:
        return sum(1 for u in self.units if u.build.status is BuildStatus.provider_outage)

    def line(self, tpm: float | None) -> str:
        ok = sum(1 for u in self.units if u.build.status is BuildStatus.ok)
        r = f"R {self.ratio(tpm):.2f}, " if tpm else ""
        return (f"{self.name:>9}: {r}{len(self.units)} units ({ok} built, {self.outages} provider outages), "
                f"{self.provider['counted_tokens']:,} counted tokens, provider busy {self.provider['answer_span_s']:.0f} s"
                f" of {self.wall_s:.0f} s, 429s sent {self.provider['rate_limited']}, reaching a build "
                f"{self.rate_limited_to_builds}, timeouts {self.timeouts}, cores busy {self.cpu_busy:.0%}")


async def sweep(name: str, root: Path, *, lanes: int, iterations: int, pressure: dict[str, Any],
                concurrency: int | None, gateway: bool) -> Outcome:
    os.environ[PRESSURE_ENV] = json.dumps(pressure)
    out = root / name
    cfg = RunConfig(cases_paths=[CASES], filter="smoke", iterations=iterations, backend="process", lanes=lanes,
                    builder="instance-ai", model_server="scripted", state_dir=root / "state", output_dir=out,
                    run_id=f"provider-limit-{name}-{int(time.time())}", concurrency=concurrency,
                    model_gateway=gateway, concurrency_max=lanes * 4)
    busy0, total0 = cpu_ticks()
    t0 = time.monotonic()
    outcome = await Run(await prepare(cfg)).execute()
    wall = time.monotonic() - t0
    busy1, total1 = cpu_ticks()
    if not outcome.ok:
        raise SystemExit(f"{name}: the run failed: {outcome.errors}")
    data = json.loads((out / "eval-results.json").read_text())["orchestrator"]
    units = [UnitResult.model_validate(u) for u in data["units"]]
    return Outcome(name, units, data["config"]["scripted_provider"], data["config"].get("model_gateway_status"), wall,
                   (busy1 - busy0) / max(1, total1 - total0))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lanes", type=int, default=4)
    parser.add_argument("--iterations", type=int, default=8, help="of each smoke case, per policy")
    parser.add_argument("--calibration-iterations", type=int, default=4)
    parser.add_argument("--latency-s", type=float, default=8.0)
    parser.add_argument("--burst-s", type=float, default=5.0)
    parser.add_argument("--tpm", type=int, default=None, help="the provider's limit (skips the calibration)")
    parser.add_argument("--keep", default=None, help="keep each policy's run (results, ledger) in this folder")
    parser.add_argument("--policies", default="fixed x2,fixed x4,gateway",
                        help="comma-separated subset to run (the last line needs all three)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    for key in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "N8N_INSTANCE_AI_MODEL_API_KEY"):
        os.environ.pop(key, None)
    base = {"latency_s": args.latency_s, "prompt_cache": True}
    with tempfile.TemporaryDirectory(prefix="provider-limit-") as tmp:
        root = Path(args.keep) if args.keep else Path(tmp)
        if args.tpm is None:
            calib = await sweep("calibrate", root, lanes=args.lanes, iterations=args.calibration_iterations,
                                pressure=base, concurrency=args.lanes * 4, gateway=False)
            per_unit = calib.provider["counted_tokens"] / len(calib.units)
            unit_s = statistics.fmean(u.finished_at - u.started_at for u in calib.units)
            demand_x4 = args.lanes * 4 * per_unit / unit_s * 60  # tokens a minute of lanes × 4 builds
            tpm = int(demand_x4 / 2)
            print(calib.line(None))
            print(f"lanes × 4 use {demand_x4:,.0f} tokens/min ({per_unit:,.0f} counted tokens per unit, "
                  f"{unit_s:.0f} s per unit): the provider's limit is half, {tpm:,} tokens/min", flush=True)
        else:
            tpm = args.tpm
        limited = {**base, "tpm": tpm, "burst_s": args.burst_s}
        wanted = {p.strip() for p in args.policies.split(",")}
        runs = {}
        for name, concurrency, gateway in (("fixed x2", args.lanes * 2, False), ("fixed x4", args.lanes * 4, False),
                                           ("gateway", None, True)):
            if name not in wanted:
                continue
            runs[name] = await sweep(name.replace(" ", "-"), root, lanes=args.lanes, iterations=args.iterations,
                                     pressure=limited, concurrency=concurrency, gateway=gateway)
            runs[name].name = name
            print(runs[name].line(tpm), flush=True)
            status = runs[name].gateway
            if status:
                caps = [c["cap"] for c in status.get("concurrency_changes") or []]
                print(f"gateway concurrency: {len(caps)} change(s), last {status.get('concurrency')}, "
                      f"range {min(caps, default=0)}…{max(caps, default=0)}", flush=True)
    if len(runs) == 3:
        gw, x2, x4 = runs["gateway"], runs["fixed x2"], runs["fixed x4"]
        print(f"provider limit: gateway {gw.ratio(tpm):.2f} x bound, timeouts {gw.timeouts}, 429s reaching a build "
              f"{gw.rate_limited_to_builds} (fixed x2 {x2.ratio(tpm):.2f}, fixed x4 {x4.ratio(tpm):.2f} / "
              f"{x4.timeouts})")


if __name__ == "__main__":
    asyncio.run(main())
