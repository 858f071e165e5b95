"""Bad input beyond the case body (``test_case_fuzz.py`` covers that): case *files* with any
bytes, profile files, ``--env`` pairs, ``--base-url`` lists and run flags. Each returns a value or
raises a ``ConfigError`` naming the input at fault — never another exception, never a hang.
"""

from __future__ import annotations

import tempfile
from datetime import timedelta
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.cases.sources import load_disk
from orchestrator.errors import ConfigError
from orchestrator.lanes.pool import parse_base_urls
from orchestrator.lanes.profiles import parse_overrides, parse_profile
from orchestrator.run.config import RunConfig
from orchestrator.run.resolve import resolve

FUZZ = settings(max_examples=150, deadline=timedelta(milliseconds=500), suppress_health_check=[HealthCheck.too_slow])
TEXT = st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=80)
LINES = st.lists(st.sampled_from(["KEY=value", "N8N_X=1", "# c", "", "@include other.env", "=x", "A_TOKEN=s",
                                  "bad key=1", "K==", " SPACED = yes "]) | TEXT, max_size=6).map("\n".join)


@FUZZ
@given(st.lists(st.binary(max_size=200) | TEXT.map(str.encode), min_size=1, max_size=4))
def test_case_files_with_any_bytes_load_or_report(contents: list[bytes]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for i, data in enumerate(contents):
            (folder / f"case-{i}.json").write_bytes(data)
        loaded, issues = load_disk([folder, folder / "missing.json"])
    assert len(loaded) + len({i.source for i in issues}) >= len(contents)  # every file: a case or issues
    assert any("missing.json" in i.source for i in issues)
    assert all(i.source and i.message for i in issues)


@FUZZ
@given(LINES)
def test_profile_files_parse_or_name_the_line(text: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.env"
        path.write_text(text, encoding="utf-8")
        (Path(tmp) / "other.env").write_text("OTHER=1\n")
        try:
            env = parse_profile(path)
        except ConfigError as exc:
            assert "fuzz.env" in str(exc) or "other.env" in str(exc)
            assert "\n" not in str(exc)
        else:
            assert all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())


@FUZZ
@given(st.lists(TEXT, max_size=5))
def test_env_overrides_parse_or_name_the_flag(pairs: list[str]) -> None:
    try:
        out = parse_overrides(pairs)
    except ConfigError as exc:
        assert str(exc).startswith("--env: ")
    else:
        assert len(out) <= len(pairs)


@FUZZ
@given(st.lists(TEXT | st.sampled_from(["http://127.0.0.1:5678", "https://lane.invalid", "ftp://x", "http://", ""]),
                max_size=4).map(",".join))
def test_base_urls_parse_or_name_the_flag(value: str) -> None:
    """Through the run's validation (what ``--base-url`` meets first), then the parser it calls."""
    try:
        resolve(RunConfig(backend="static", base_url=value, lanes=1))
    except ConfigError as exc:
        assert str(exc).startswith(("--base-url: ", "--lanes: ")), str(exc)
        assert "\n" not in str(exc)
    else:
        urls = parse_base_urls(value)
        assert urls and all(u.startswith(("http://", "https://")) for u in urls)


INTS = st.integers(min_value=-(2**40), max_value=2**40)


@FUZZ
@given(iterations=INTS, lanes=INTS, per_lane=INTS, concurrency=st.none() | INTS, timeout_ms=INTS,
       metrics_port=st.none() | INTS, backend=st.sampled_from(["process", "static", "docker", "nope", ""]),
       model_server=st.sampled_from(["auto", "real", "scripted", "x"]))
def test_run_flags_validate_or_name_the_flag(iterations: int, lanes: int, per_lane: int, concurrency: int | None,
                                             timeout_ms: int, metrics_port: int | None, backend: str,
                                             model_server: str) -> None:
    try:  # field ranges are checked as the config is made, the rest by resolve(): the same one line
        resolve(RunConfig(iterations=iterations, lanes=lanes, per_lane_builds=per_lane, concurrency=concurrency,
                  timeout_ms=timeout_ms, metrics_port=metrics_port, backend=backend, model_server=model_server,
                  base_url="http://127.0.0.1:6100" if backend == "static" else None))
    except ConfigError as exc:
        assert str(exc).startswith("--"), str(exc)
        assert "\n" not in str(exc)
    else:
        assert iterations >= 1 and lanes >= 1 and per_lane >= 1 and timeout_ms >= 1
