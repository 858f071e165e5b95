"""Secret redaction: values registered anywhere are masked everywhere, and memory stays flat."""

from __future__ import annotations

import re
import secrets
import tracemalloc

from orchestrator.redact import MASK, register_secret, redact, redact_obj


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
    assert len(re._cache) < 50  # type: ignore[attr-defined]
