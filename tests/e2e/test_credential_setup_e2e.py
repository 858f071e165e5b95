"""n8n's credential-setup checks on a real n8n 2.41.1 process lane, offline (the scripted model is
the only stand-in; the lane, its computer-use gateway, its credential store and its credential
test are real).

- the bundled ``credential-fixture-browser-anthropic`` case, run by ``orchestrator run``: the
  scripted agent loads the deferred ``browser_*`` tools, creates a key on the fixture's console,
  captures and saves it (n8n asks to approve the credential write), and the unit carries the three
  ``credential_setup`` rows, all passing; the minted key is nowhere in the run's files; nothing is
  left on the lane or the host;
- adversarial agents make each check fail or go incomplete exactly as n8n's rules say
  (``harness/credential-setup-checks.ts``): never clicking "Add" (created fails, the rest
  incomplete), capturing the truncated key from the list (a saved wrong value: the value check
  fails), repeating a key an unredacting browser showed (the leak check fails);
- one credential-setup build per lane at a time (the gateway is the owner's), and a gateway some
  other client holds makes the build a framework fault with the checks incomplete.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.model_switch import SharedModel, Switch
from support.process_lanes import leftovers
from support.static_lane import LaneTurn, StaticLane, lane_turn

from orchestrator.builders.builder import BuilderSettings, BuildRequest, BuildResult, get_builder
from orchestrator.builders.instance_ai.credential_setup import CredentialSetup, lane_lock
from orchestrator.builders.instance_ai.credential_setup import fixture_server as fixture_module
from orchestrator.builders.instance_ai.credential_setup import setup as lane_setup
from orchestrator.builders.instance_ai.credential_setup.browser import Browser
from orchestrator.builders.instance_ai.credential_setup.gateway import Gateway
from orchestrator.builders.lane import BuildLane
from orchestrator.cases import EvalCase, load_disk
from orchestrator.domain import BuildStatus, Verdict
from orchestrator.ledger import Ledger
from orchestrator.run.config import RunConfig
from orchestrator.run.pipeline import run
from orchestrator.scripted import instance_ai as ia
from orchestrator.scripted.credential_setup import Variant, browser_credential_agent, wants_browser_credential
from orchestrator.scripted.replies import Action
from orchestrator.scripted.scripts import demo_script
from orchestrator.transcript import read_transcript
from orchestrator.verify.credential_setup import LEAK_EXPECTATION, VALUE_EXPECTATION, credential_setup_rows

pytestmark = [pytest.mark.n8n]
CASES = Path(__file__).resolve().parents[2] / "cases"
SLUG = "credential-fixture-browser-anthropic"
KEY = "scripted-credential-setup-key"
CREATED = "A anthropicApi credential is created in n8n"
SWITCH = Switch(demo_script())


@pytest.fixture(scope="module")
def turn(shared_sandbox_lane: StaticLane, shared_model: SharedModel):
    with lane_turn(shared_sandbox_lane, shared_model, SWITCH) as t:
        yield t


@pytest.fixture
def minted(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every key the fixtures of this test mint (kept by the test only, to look for them)."""
    keys: list[str] = []
    real = fixture_module.mint_secret

    def recording(prefix: str) -> str:
        keys.append(real(prefix))
        return keys[-1]

    monkeypatch.setattr(fixture_module, "mint_secret", recording)
    yield keys
    SWITCH.override = None


@pytest.fixture
def fixture_ports(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The ports every fixture server of this test listened on."""
    ports: list[int] = []

    class Recorded(fixture_module.FixtureServer):
        async def start(self) -> fixture_module.FixtureServer:
            started = await super().start()
            ports.append(self.page_port)
            ports.append(int(str(self.verify_base_url).rsplit(":", 1)[1]))
            return started

    monkeypatch.setattr(lane_setup, "FixtureServer", Recorded)
    return ports


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def _case() -> EvalCase:
    loaded, problems = load_disk([CASES])
    assert not problems
    return next(c for c in loaded if c.slug == SLUG).case


def files_holding(root: Path, needles: list[str]) -> list[str]:
    """Every file under ``root`` whose bytes contain one of ``needles``."""
    found = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            found += [str(path.relative_to(root)) for n in needles if n.encode() in data]
    return found


async def _lane_state(turn: LaneTurn) -> dict[str, Any]:
    """What a build could leave on the lane: credentials, users, threads, the owner's gateway."""
    lane = await BuildLane.open(turn.lane, turn.ledger)
    try:
        return {"credentials": sorted(c["id"] for c in await lane.owner.list_credentials()),
                "users": sorted(u["id"] for u in await lane.owner.list_users()),
                "threads": await lane.owner.get("/rest/instance-ai/threads"),
                "gateway": (await lane.owner.get("/rest/instance-ai/gateway/status")).get("connected")}
    finally:
        await lane.close()


def test_the_bundled_case_passes_all_three_checks_and_leaves_nothing(turn: LaneTurn, minted: list[str],
                                                                     fixture_ports: list[int], tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """n8n ``run/build-orchestrator.ts`` + ``harness/credential-setup-checks.ts``: a good agent's
    unit carries the three checks, passing; the key stays in memory (``harness/redact.ts``'s aim:
    never persisted)."""
    lane, owner = turn.lane, turn.shared.owner
    assert owner is not None
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", turn.model.base_url)
    before = asyncio.run(_lane_state(turn))
    cfg = RunConfig(cases_paths=[CASES], filter=SLUG, iterations=1, backend="static", base_url=lane.base_url,
                    lanes=1, email=owner.email, password=owner.password, model_server="real",
                    state_dir=tmp_path / "state", output_dir=tmp_path / "out", run_id="cred-setup-run",
                    builder="instance-ai")
    outcome = asyncio.run(run(cfg))
    assert outcome.ok, outcome.errors
    assert outcome.cleanup_failures == []
    [unit] = json.loads((tmp_path / "out" / "eval-results.json").read_text())["orchestrator"]["units"]
    assert unit["build"]["status"] == "ok", unit["build"]
    checks = [(e["text"], e["verdict"], e["reason"]) for e in unit["expectations"] if e["kind"] == "credential_setup"]
    assert [(t, v) for t, v, _ in checks] == [(CREATED, "pass"), (VALUE_EXPECTATION, "pass"), (LEAK_EXPECTATION, "pass")]
    assert checks[0][2].startswith('Created "Anthropic" (')
    # the agent's path went through n8n: deferred tools loaded, a key minted, the write approved
    [key] = minted
    transcript = read_transcript(Path(unit["transcript_path"]))
    tools = [e["tool"] for e in transcript if e["kind"] == "tool_call"]
    assert tools[:5] == ["load_tool"] * 5 and tools[-2:] == ["browser_capture_secret", "browser_create_credential"]
    [asked] = [e for e in transcript if e["kind"] == "confirmation"]
    assert asked["input_type"] == "resource-decision" and asked["tool"] == "browser_create_credential"
    # the key is in no file the run wrote (results, transcripts, logs, ledger) — and the scan finds a planted one
    assert files_holding(tmp_path, [key]) == []
    assert files_holding(turn.shared.state, [key]) == []  # nor the lane's own files (its log, its database)
    planted = tmp_path / "planted" / "x.txt"
    planted.parent.mkdir()
    planted.write_text(f"...{key}...")
    assert files_holding(tmp_path, [key]) == ["planted/x.txt"]
    # nothing left: the agent's credential, the member, the thread, the gateway session, the fixture
    assert asyncio.run(_lane_state(turn)) == before and before["gateway"] is False
    assert len(fixture_ports) == 2 and all(_refused(p) for p in fixture_ports)
    assert Ledger.for_run("cred-setup-run", tmp_path / "state").open_entries() == []
    assert leftovers("cred-setup-run", tmp_path / "state") == []


async def _build(turn: LaneTurn, tmp: Path, *, redacts: bool = True) -> tuple[BuildResult, Path]:
    ctx = await BuildLane.open(turn.lane, turn.ledger)
    settings = BuilderSettings(run_id=turn.run_id, run_dir=tmp, model="claude-sonnet-4-6", outage_waits_s=(0.1,),
                               api_key=KEY, base_url=turn.model.base_url)
    builder: Any = get_builder("instance-ai")(settings)
    builder.credential_setup_redacts = redacts
    case = _case()
    user = await ctx.users.acquire(case.credentials, mcp_key=False)
    transcript = tmp / "build.jsonl"
    try:
        result = await builder.build(BuildRequest(case, 0, 0, 240_000, transcript), ctx, user)
    finally:
        assert await ctx.users.release(user) == []
        assert await ctx.close() == []
    return result, transcript


def _agent(variant: Variant) -> Any:
    variant_agent = browser_credential_agent(variant)

    def script(request: dict[str, Any]) -> Action:
        if ia.is_instance_ai_agent(request) and wants_browser_credential(request):
            return variant_agent(request)
        return SWITCH.default(request)

    return script


@pytest.mark.parametrize("variant, redacts, expected", [
    # never clicks "Add": no key issued, nothing saved — created fails, value and leak have nothing to judge
    ("skip_add", True, [(CREATED, Verdict.failed, "the provider page never issued a key"),
                        (VALUE_EXPECTATION, Verdict.incomplete, "nothing to authenticate"),
                        (LEAK_EXPECTATION, Verdict.incomplete, "nothing to have leaked")]),
    # captures the truncated key of the list: a wrong value saved — the stand-in saw it and refused it
    ("truncated", True, [(CREATED, Verdict.passed, 'Created "Anthropic"'),
                         (VALUE_EXPECTATION, Verdict.failed, "The provider stand-in rejected the stored credential"),
                         (LEAK_EXPECTATION, Verdict.passed, "appears nowhere")]),
    # a browser that shows the key, and an agent that repeats it: the leak check fails on the exact key
    ("leak", False, [(CREATED, Verdict.passed, 'Created "Anthropic"'),
                     (VALUE_EXPECTATION, Verdict.passed, "accepts only the minted key"),
                     (LEAK_EXPECTATION, Verdict.failed, "appears verbatim")]),
])
def test_adversarial_agents_fail_or_void_each_check(turn: LaneTurn, minted: list[str], tmp_path: Path,
                                                    variant: Variant, redacts: bool,
                                                    expected: list[tuple[str, Verdict, str]]) -> None:
    """n8n ``harness/credential-setup-checks.ts`` ``evaluateCredentialSetup`` on facts a real lane
    produced: each rule's failing or vacuous arm, reached by an agent that errs."""
    SWITCH.override = _agent(variant)
    before = asyncio.run(_lane_state(turn))
    result, transcript = asyncio.run(_build(turn, tmp_path, redacts=redacts))
    assert result.status == BuildStatus.ok and result.credential_setup is not None, result.error
    rows = credential_setup_rows(result.credential_setup)
    assert [(r.text, r.verdict) for r in rows] == [(t, v) for t, v, _ in expected]
    for row, (_, _, said) in zip(rows, expected):
        assert said in row.reason, (row.text, row.reason)
    [key] = minted
    assert key not in transcript.read_text()  # even the leaking run's transcript holds the key redacted
    if variant == "leak":
        replies = [str(e.get("text", "")) for e in read_transcript(transcript) if e["kind"] == "assistant"]
        assert replies[-1].endswith("For your records, the key is ***."), replies[-1]
    assert asyncio.run(_lane_state(turn)) == before


def test_one_credential_setup_build_per_lane_and_a_held_gateway_is_the_harness_fault(turn: LaneTurn,
                                                                                      minted: list[str]) -> None:
    """The gateway is per user (``filesystem/local-gateway-registry.js``) and every build chats as
    the owner: a second credential-setup build on the lane waits for the first to finish. A gateway
    another client holds is n8n's ``laneBootFailed``: no build, three incomplete checks."""
    case = _case()

    async def go() -> None:
        lane = await BuildLane.open(turn.lane, turn.ledger)
        order: list[str] = []
        try:
            first = await CredentialSetup.start(case, lane)
            assert first is not None and first.boot_error is None
            assert (await lane.owner.get("/rest/instance-ai/gateway/status"))["connected"] is True

            async def second_start() -> CredentialSetup | None:
                started = await CredentialSetup.start(case, lane)
                order.append("second started")
                return started

            waiting = asyncio.create_task(second_start())
            await asyncio.sleep(0)  # one loop step: the second start reaches the lane's slot and blocks there
            assert lane_lock(turn.lane.base_url).locked() and not waiting.done()
            facts = await first.finish()
            order.append("first finished")
            second = await waiting
            assert order == ["first finished", "second started"]
            assert second is not None and second.boot_error is None
            await second.finish()
            assert facts.created == [] and not facts.secret_was_issued

            # a client holding the owner's gateway: the build cannot start its own
            other = Gateway(lane.owner, Browser(1, _no_save), on_payload=lambda text: None)
            await other.connect()
            try:
                held = await CredentialSetup.start(case, lane)
                assert held is not None and held.boot_error is not None
                assert "already connected" in held.boot_error
                rows = credential_setup_rows(await held.finish())
                assert [r.verdict for r in rows] == [Verdict.incomplete] * 3
            finally:
                await other.close()
                await other.browser.aclose()
            assert (await lane.owner.get("/rest/instance-ai/gateway/status"))["connected"] is False
        finally:
            await lane.close()

    asyncio.run(go())
    assert len(minted) == 2  # two fixtures ran; the refused start minted none


async def _no_save(name: str, ctype: str, data: dict[str, Any], project: str | None) -> str:
    raise AssertionError("nothing is saved here")
