"""How long the CLI takes to start: ``orchestrator --help`` and ``orchestrator cases validate cases/``.

Each command runs 5 times in a fresh process (after one warm-up run that fills the OS and
bytecode caches); the median wall time of each is printed, then one line with the slower of the
two: ``cli start: <seconds> s``. The target is ≤ 0.5 s (commands import their heavy dependencies —
anthropic, scipy, kubernetes, docker, langsmith — only when they run).

    .venv/bin/python bench/cli_start.py [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ORCH = REPO / ".venv" / "bin" / "orchestrator"

COMMANDS: dict[str, list[str]] = {
    "orchestrator --help": ["--help"],
    "orchestrator cases validate cases/": ["cases", "validate", str(REPO / "cases")],
}


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _time(args: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run in a fresh process."""
    exe = [str(ORCH)] if ORCH.exists() else [sys.executable, "-m", "orchestrator"]
    c0, t0 = _cpu(), time.perf_counter()
    done = subprocess.run([*exe, *args], capture_output=True, text=True, cwd=REPO)
    elapsed, cpu = time.perf_counter() - t0, _cpu() - c0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} exited {done.returncode}: {done.stderr.strip()[:300]}")
    return elapsed, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    opts = parser.parse_args()
    medians: dict[str, float] = {}
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPU(s): wall time includes waiting for a CPU")
    for label, args in COMMANDS.items():
        _time(args)  # warm-up
        samples = [_time(args) for _ in range(opts.runs)]
        walls = [w for w, _ in samples]
        medians[label] = statistics.median(walls)
        print(f"{label}: median {medians[label]:.3f} s over {opts.runs} runs "
              f"(min {min(walls):.3f}, max {max(walls):.3f}; CPU median {statistics.median(c for _, c in samples):.3f} s)")
    print(f"cli start: {max(medians.values()):.3f} s")


if __name__ == "__main__":
    main()
