"""Secret redaction: values registered anywhere are masked everywhere, and memory stays flat."""

from __future__ import annotations

import re
import secrets
import tracemalloc

import pytest

from orchestrator import redact as redact_module
from orchestrator.redact import (
    MASK,
    compiled_chars,
    redact,
    redact_obj,
    register_secret,
)


def test_registered_values_and_secret_shapes_are_masked() -> None:
    token = "tok-" + secrets.token_hex(10)
    register_secret(token)
    register_secret("short")  # too short to register: common words must survive
    assert redact(f"url?token={token}&x=1") == f"url?token={MASK}&x=1"
    assert "short" in redact("a short word")
    assert redact("Authorization: Bearer abcdefghijklmnop") == f"Authorization: Bearer {MASK}"
    assert redact_obj({"k": [token, {"n": token}]}) == {"k": [MASK, {"n": MASK}]}


def test_longer_secret_containing_a_shorter_one_is_masked_whole() -> None:
    inner = "inner-" + secrets.token_hex(6)
    outer = f"prefix-{inner}-suffix-{secrets.token_hex(4)}"
    register_secret(inner)
    register_secret(outer)
    assert redact(f"[{outer}]") == f"[{MASK}]"


def test_many_secrets_do_not_pile_up_compiled_patterns() -> None:
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for i in range(600):
        register_secret("s3cret-" + secrets.token_hex(16))
        if i % 4 == 0:  # a run redacts between registrations (a unit registers ~4 secrets)
            redact("a line with nothing to hide")
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert grown < 20 * 1024 * 1024, f"redaction grew memory by {grown / 2**20:.1f} MiB for 600 secrets"
    assert not any("s3cret-" in str(key) for key in re._cache)  # type: ignore[attr-defined]  # no regex per secret


def test_registering_2000_secrets_compiles_n_log_n_pattern_text_not_n_squared(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A redaction between every few registrations (as a run does) must not recompile every secret
    each time: the pattern text compiled grows ~N log N (here under 12 x the secrets' own text; one
    alternation rebuilt per batch compiled ~250 x). Counted, not timed; bench/redact.py times it.

    The registry starts empty: secrets other tests registered would be recompiled with these (a
    bucket of them merges in) and count against a bound stated for these 2,000 alone (CI measured
    12.2 x after the whole suite, 5.7 x from empty)."""
    monkeypatch.setattr(redact_module, "_secrets", set())
    monkeypatch.setattr(redact_module, "_pending", [])
    monkeypatch.setattr(redact_module, "_buckets", [])
    values = ["k3y-" + secrets.token_hex(16) for _ in range(2000)]
    before = compiled_chars()
    for i, value in enumerate(values):
        register_secret(value)
        if i % 4 == 0:
            assert redact(f"x {value} y") == f"x {MASK} y"
    grown = compiled_chars() - before
    own = sum(len(re.escape(v)) + 1 for v in values)
    assert grown < 12 * own, f"compiled {grown / own:.1f} x the secrets' text"
    assert redact(" ".join(values[::97])) == " ".join([MASK] * len(values[::97]))


def test_overlapping_secrets_are_masked_together() -> None:
    left = "left-" + secrets.token_hex(5)
    right = left[-6:] + "-right-" + secrets.token_hex(4)  # starts inside `left`
    register_secret(left)
    register_secret(right)
    assert redact(f"<{left}{right[6:]}>") == f"<{MASK}>"
    assert redact(f"<{left}|{right}>") == f"<{MASK}|{MASK}>"
