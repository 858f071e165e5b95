"""Bench: registering secrets while redacting, as a run does (a unit registers ~4 secrets -- member
password, MCP key, cookies -- and log lines are redacted in between).

Prints seconds for N secrets registered ``--batch`` at a time with one redaction of a log line
after each batch, for :mod:`orchestrator.redact` and for the previous approach (one alternation of
every secret recompiled after each batch, kept here for comparison), and the time to redact a
10 kB text once all N are registered.

    .venv/bin/python bench/redact.py [--secrets 2000] [--batch 4] [--skip-old]
"""

from __future__ import annotations

import argparse
import re
import secrets
import time

from orchestrator import redact as current

LINE = "GET /rest/workflows?filter=x 200 " * 6


def old_approach(values: list[str], batch: int) -> float:
    """One alternation of every secret, longest first, recompiled when a secret was added."""
    known: list[str] = []
    t0 = time.perf_counter()
    for i, value in enumerate(values):
        known.append(value)
        if i % batch == batch - 1:
            pattern = re.compile("|".join(re.escape(s) for s in sorted(known, key=len, reverse=True)))
            re.purge()
            pattern.sub("***", LINE)
    return time.perf_counter() - t0


def new_approach(values: list[str], batch: int) -> float:
    t0 = time.perf_counter()
    for i, value in enumerate(values):
        current.register_secret(value)
        if i % batch == batch - 1:
            current.redact(LINE)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--secrets", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--skip-old", action="store_true", help="do not time the previous (quadratic) approach")
    args = parser.parse_args()
    values = [f"s3cret-{secrets.token_hex(16)}" for _ in range(args.secrets)]
    new = new_approach(values, args.batch)
    text = (LINE * 60)[:10_000] + values[len(values) // 2]
    t0 = time.perf_counter()
    for _ in range(20):
        assert current.MASK in current.redact(text)
    per_redact_ms = (time.perf_counter() - t0) / 20 * 1000
    if not args.skip_old:
        old = old_approach(values, args.batch)
        print(f"previous (one alternation recompiled per batch): {old:8.2f} s for {args.secrets} secrets")
    print(f"orchestrator.redact (Aho-Corasick buckets):        {new:8.2f} s for {args.secrets} secrets "
          f"(secret text compiled: {current.compiled_chars() / sum(len(v) + 1 for v in values):.1f} x the secrets)")
    print(f"redacting 10 kB with {args.secrets} secrets registered: {per_redact_ms:.2f} ms")


if __name__ == "__main__":
    main()
