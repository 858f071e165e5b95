"""Case sources (disk, LangTracer export over real HTTP on loopback) and selection."""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from orchestrator.cases import (
    CaseLoadError,
    LoadedCase,
    load_disk,
    load_langtracer,
    load_selected,
    parse_case,
    select_cases,
)
from orchestrator.errors import UserError
from orchestrator.redact import redact

BODY: dict[str, Any] = {
    "conversation": [{"role": "user", "text": "Build a workflow that returns 42."}],
    "complexity": "simple",
    "tags": ["t"],
    "outcomeExpectations": ["It returns 42."],
}


def body(**over: Any) -> dict[str, Any]:
    result = copy.deepcopy(BODY)
    result.update(over)
    return result


def write(path: Path, content: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


# --------------------------------------------------------------------------- disk


def test_directory_is_scanned_for_json_sorted(tmp_path: Path) -> None:
    write(tmp_path / "b-case.json", body())
    write(tmp_path / "a-case.json", body(datasets=["pr", "full"]))
    write(tmp_path / "notes.txt", "not a case")
    write(tmp_path / "nested" / "c-case.json", body())
    cases, issues = load_disk([tmp_path])
    assert issues == []
    assert [c.slug for c in cases] == ["a-case", "b-case"]
    assert cases[0].source == str(tmp_path / "a-case.json")
    assert cases[0].case.datasets == ["pr", "full"]


def test_files_and_directories_mix_and_every_issue_is_returned(tmp_path: Path) -> None:
    good = write(tmp_path / "dir" / "good.json", body())
    write(tmp_path / "dir" / "bad.json", body(complexity="huge"))
    extra = write(tmp_path / "extra.json", "{ nope")
    cases, issues = load_disk([tmp_path / "dir", extra, tmp_path / "missing.json"])
    assert [c.source for c in cases] == [str(good)]
    assert [(Path(i.source).name, i.field) for i in issues] == [
        ("missing.json", "<file>"),
        ("bad.json", "complexity"),
        ("extra.json", "<json>"),
    ]
    assert "line 1, column 3" in issues[2].message


def test_same_slug_from_two_places_is_an_issue(tmp_path: Path) -> None:
    first = write(tmp_path / "one" / "dup.json", body())
    second = write(tmp_path / "two" / "dup.json", body())
    cases, issues = load_disk([tmp_path / "one", tmp_path / "two", first])
    assert [c.source for c in cases] == [str(first)]  # naming the same file twice is not a clash
    assert [(i.source, i.field) for i in issues] == [(str(second), "(case)")]
    assert "duplicate slug 'dup'" in issues[0].message


def test_non_utf8_file_is_reported_not_raised(tmp_path: Path) -> None:
    path = tmp_path / "latin.json"
    path.write_bytes(b'{"tags": ["caf\xe9"]}')
    cases, issues = load_disk([path])
    assert cases == [] and issues[0].field == "<file>" and "cannot read" in issues[0].message


# --------------------------------------------------------------------------- selection


def loaded(slug: str, datasets: list[str] | None = None) -> LoadedCase:
    case, issues = parse_case(body(datasets=datasets or ["full"]), slug)
    assert case is not None, issues
    return LoadedCase(slug=slug, source=f"{slug}.json", case=case)


POOL = [
    loaded("contact-form-automation", ["pr", "full"]),
    loaded("deduplication-trigger"),
    loaded("smoke-manual-set", ["smoke", "full"]),
    loaded("smoke-manual-code", ["smoke"]),
]


def slugs(cases: list[LoadedCase]) -> list[str]:
    return [c.slug for c in cases]


def test_no_selection_keeps_everything() -> None:
    assert slugs(select_cases(POOL)) == slugs(POOL)


def test_filter_is_comma_separated_substrings_or() -> None:
    assert slugs(select_cases(POOL, filter="contact-form, dedup")) == ["contact-form-automation", "deduplication-trigger"]
    assert slugs(select_cases(POOL, filter="nothing-matches")) == []
    assert slugs(select_cases(POOL, filter=" , ")) == slugs(POOL)


def test_exclude_applies_after_filter() -> None:
    assert slugs(select_cases(POOL, filter="smoke", exclude="code")) == ["smoke-manual-set"]
    assert slugs(select_cases(POOL, exclude="smoke,trigger")) == ["contact-form-automation"]


def test_tier_is_dataset_membership() -> None:
    assert slugs(select_cases(POOL, tier="smoke")) == ["smoke-manual-set", "smoke-manual-code"]
    assert slugs(select_cases(POOL, tier="full")) == ["contact-form-automation", "deduplication-trigger", "smoke-manual-set"]
    assert slugs(select_cases(POOL, tier="pr", filter="smoke")) == []


async def test_load_selected_defaults_to_the_cases_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "cases" / "smoke-one.json", body(datasets=["smoke"]))
    write(tmp_path / "cases" / "other.json", body())
    monkeypatch.chdir(tmp_path)
    assert slugs(await load_selected("disk", None, None, tier="smoke")) == ["smoke-one"]
    assert slugs(await load_selected("disk", [], None, exclude="smoke")) == ["other"]


async def test_load_selected_fails_on_any_invalid_case(tmp_path: Path) -> None:
    write(tmp_path / "ok.json", body())
    write(tmp_path / "bad1.json", body(tags="no"))
    write(tmp_path / "bad2.json", body(buildExpectations=["x"]))
    with pytest.raises(CaseLoadError) as caught:
        await load_selected("disk", [tmp_path], None, filter="ok")
    assert [(Path(i.source).name, i.field) for i in caught.value.issues] == [("bad1.json", "tags"), ("bad2.json", "buildExpectations")]


@pytest.mark.parametrize(
    ("source", "paths", "suite", "fragment"),
    [
        ("s3", None, None, "--source must be one of disk, langtracer"),
        ("langtracer", None, None, "--suite is required"),
        ("langtracer", [Path("cases")], "baseline", "PATH arguments only apply to --source disk"),
        ("disk", None, "baseline", "--suite only applies to --source langtracer"),
    ],
)
async def test_bad_source_combinations_are_user_errors(source: str, paths: list[Path] | None, suite: str | None, fragment: str) -> None:
    with pytest.raises(UserError, match=fragment):
        await load_selected(source, paths, suite)


# --------------------------------------------------------------------------- langtracer


@dataclass
class FakeLangTracer:
    """A LangTracer stand-in on loopback: serves canned responses and records requests."""

    routes: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    requests: list[tuple[str, str | None]] = field(default_factory=list)
    url: str = ""

    def serve(self, path: str, payload: object, status: int = 200) -> None:
        text = payload if isinstance(payload, str) else json.dumps(payload)
        self.routes.setdefault(path, []).append((status, text))


@pytest.fixture
def langtracer() -> Iterator[FakeLangTracer]:
    fake = FakeLangTracer()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            fake.requests.append((self.path, self.headers.get("Authorization")))
            queue = fake.routes.get(self.path)
            status, text = (queue.pop(0) if len(queue) > 1 else queue[0]) if queue else (404, '{"error":"not found"}')
            data = text.encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


KEY = "lt_testkey0123456789abcdef"
EXPORT_PATH = "/api/v1/suites/baseline/export"


async def test_export_object_is_pulled_with_bearer_key_and_validated(langtracer: FakeLangTracer) -> None:
    langtracer.serve(EXPORT_PATH, {
        "suite": {"id": 7, "slug": "baseline"},
        "cases": [
            {"name": "contact-form", "id": 101, "suiteId": 7, "createdAt": "2025-01-01", **body(datasets=["pr", "full"])},
            {"name": "nested-body", "case": body(tags=["nested"])},
        ],
    })
    cases, issues = await load_langtracer("baseline", base_url=langtracer.url + "/", api_key=KEY)
    assert issues == []
    assert [(c.slug, c.source) for c in cases] == [
        ("contact-form", "langtracer:baseline/contact-form"),
        ("nested-body", "langtracer:baseline/nested-body"),
    ]
    assert cases[0].case.datasets == ["pr", "full"]
    assert cases[1].case.tags == ["nested"]
    assert langtracer.requests == [(EXPORT_PATH, f"Bearer {KEY}")]
    assert redact(f"key={KEY}") == "key=***"


async def test_top_level_list_and_env_configuration(langtracer: FakeLangTracer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANGTRACER_URL", langtracer.url)
    monkeypatch.setenv("LANGTRACER_API_KEY", "envkey-0123456789")
    langtracer.serve("/api/v1/suites/12/export", [{"slug": "listed", **body()}])
    cases, issues = await load_langtracer("12")
    assert issues == [] and [c.slug for c in cases] == ["listed"]
    assert langtracer.requests[-1][1] == "Bearer envkey-0123456789"


async def test_pre_union_key_fails_the_pull_by_name(langtracer: FakeLangTracer) -> None:
    langtracer.serve(EXPORT_PATH, {"cases": [
        {"name": "fine", **body()},
        {"name": "legacy", **body(seedThread={"threadId": "t-1"})},
        {"name": "", **body()},
        {"name": "fine", **body()},
    ]})
    cases, issues = await load_langtracer("baseline", base_url=langtracer.url, api_key=KEY)
    assert [c.slug for c in cases] == ["fine"]
    assert [(i.source, i.field) for i in issues] == [
        ("langtracer:baseline/legacy", "seedThread"),
        ("langtracer:baseline/#2", "name"),
        ("langtracer:baseline/fine", "name"),
    ]
    assert "pre-union seeding key" in issues[0].message
    with pytest.raises(CaseLoadError, match="seedThread"):
        await _load_selected_langtracer(langtracer, "baseline")


async def _load_selected_langtracer(langtracer: FakeLangTracer, suite: str, **selection: str) -> list[LoadedCase]:
    import os

    os.environ["LANGTRACER_URL"] = langtracer.url
    try:
        return await load_selected("langtracer", None, suite, **selection)
    finally:
        del os.environ["LANGTRACER_URL"]


async def test_load_selected_from_langtracer_applies_selection(langtracer: FakeLangTracer) -> None:
    langtracer.serve("/api/v1/suites/mini/export", {"cases": [
        {"name": "smoke-a", **body(datasets=["smoke"])},
        {"name": "smoke-b", **body()},
        {"name": "other", **body(datasets=["smoke"])},
    ]})
    selected = await _load_selected_langtracer(langtracer, "mini", filter="smoke", tier="smoke")
    assert slugs(selected) == ["smoke-a"]


async def test_missing_url_is_a_user_error_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LANGTRACER_URL", raising=False)
    with pytest.raises(UserError, match="LANGTRACER_URL"):
        await load_langtracer("baseline")


async def test_http_failures_are_user_errors(langtracer: FakeLangTracer) -> None:
    with pytest.raises(UserError, match="--suite 'nope'.*404"):
        await load_langtracer("nope", base_url=langtracer.url, api_key=KEY)
    langtracer.serve("/api/v1/suites/locked/export", {"error": "unauthorized"}, status=401)
    with pytest.raises(UserError, match="LANGTRACER_API_KEY"):
        await load_langtracer("locked", base_url=langtracer.url, api_key=KEY)
    langtracer.serve("/api/v1/suites/broken/export", {"error": f"boom {KEY}"}, status=500)
    with pytest.raises(UserError, match="HTTP 500") as caught:
        await load_langtracer("broken", base_url=langtracer.url, api_key=KEY)
    assert KEY not in str(caught.value)


async def test_transient_status_is_retried(langtracer: FakeLangTracer) -> None:
    langtracer.serve("/api/v1/suites/flaky/export", {"error": "busy"}, status=503)
    langtracer.serve("/api/v1/suites/flaky/export", {"cases": [{"name": "after-retry", **body()}]})
    cases, issues = await load_langtracer("flaky", base_url=langtracer.url, api_key=KEY)
    assert [c.slug for c in cases] == ["after-retry"] and issues == []
    assert len(langtracer.requests) == 2


async def test_unreachable_server_is_a_user_error() -> None:
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(UserError, match="cannot reach LangTracer"):
        await load_langtracer("baseline", base_url=f"http://127.0.0.1:{port}", api_key=KEY, attempts=1, timeout=2)


async def test_unusable_export_body_is_an_issue(langtracer: FakeLangTracer) -> None:
    langtracer.serve("/api/v1/suites/html/export", "<html>oops</html>")
    langtracer.serve("/api/v1/suites/shape/export", {"items": []})
    _, issues = await load_langtracer("html", base_url=langtracer.url, api_key=KEY)
    assert [(i.source, i.field) for i in issues] == [("langtracer:html", "<json>")]
    _, issues = await load_langtracer("shape", base_url=langtracer.url, api_key=KEY)
    assert "neither a list of cases nor an object" in issues[0].message


async def test_an_unknown_nested_key_is_dropped_and_an_invalid_case_fails_the_whole_load(
        langtracer: FakeLangTracer) -> None:
    """n8n ``langtracer/provider.ts`` ``casesFromExportedFiles`` with ``harness/schema.ts``
    ``EvalTestCaseSchema``: only the case body is ``.strict()``; a turn, an execution scenario and a
    credential are plain objects, so an unknown key inside one is dropped and the case loads. A case
    that is invalid is not skipped: every invalid case of the export is collected and the load
    fails, naming them all."""
    scenario = {"name": "s", "description": "", "dataSetup": "", "successCriteria": "ok", "fromLangTracer": 1}
    nested = body(conversation=[{"role": "user", "text": "Build it.", "turnId": "t-9"}],
                  executionScenarios=[scenario], credentials=[{"type": "slackApi", "uiHint": "x"}])
    langtracer.serve(EXPORT_PATH, {"cases": [{"name": "nested-extra", **nested}]})
    (loaded,) = await _load_selected_langtracer(langtracer, "baseline")
    assert loaded.case.execution_scenarios[0].name == "s" and loaded.case.credentials[0].type == "slackApi"
    assert "fromLangTracer" not in loaded.case.execution_scenarios[0].model_dump(by_alias=True)

    langtracer.serve("/api/v1/suites/drifted/export", {"cases": [
        {"name": "nested-extra", **nested},
        {"name": "bad-complexity", **body(complexity="epic")},
        {"name": "bad-attach", **body(conversation=[{"role": "user", "text": "x", "attach": {"workflow": "w", "x": 1}}])},
    ]})
    with pytest.raises(CaseLoadError) as raised:
        await _load_selected_langtracer(langtracer, "drifted")
    text = str(raised.value)
    assert "bad-complexity" in text and "bad-attach" in text and "nested-extra" not in text
