"""A replaced orchestrator pod resumes its run (``--resume``, state on the durable results volume):
the new process takes over the run id only once the old holder's Lease ran out, removes every lane
object the old pod left (uid preconditions), starts its own lanes under new names and leaves
nothing of the first behind; a holder still renewing its Lease is a run-id collision that touches
nothing. Real backend and ``kubernetes`` client on the loopback fake API server."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.k8s_fake_api import FakeApiServer

from orchestrator.errors import ConfigError
from orchestrator.lanes.kubernetes import objects as k8s
from unit.lanes.kubernetes.test_k8s_contract import NS, RUN_ID, lane_spec, make_backend

OLD = {"POD_NAME": "nightly-7-old", "POD_NAMESPACE": NS, "POD_UID": "aaaaaaaa-0000-4000-8000-00000000000a"}
NEW = {"POD_NAME": "nightly-7-new", "POD_NAMESPACE": NS, "POD_UID": "bbbbbbbb-0000-4000-8000-00000000000b"}


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as srv:
        for env in (OLD, NEW):  # the orchestrator pods the lanes are owned by
            srv.add("pods", NS, {"metadata": {"name": env["POD_NAME"], "uid": env["POD_UID"],
                                              "labels": {"app.kubernetes.io/name": "n8n-eval-orchestrator"}},
                                 "status": {"phase": "Running"}})
        yield srv


def lane_objects(server: FakeApiServer) -> set[str]:
    with server.state.cond:
        return {f"{r}/{name}" for (r, _, name), o in server.state.objects.items()
                if (o["metadata"].get("labels") or {}).get(k8s.LABEL_RUN_ID) == RUN_ID}


async def test_a_resumed_run_takes_over_and_leaves_nothing_of_the_first(server: FakeApiServer, tmp_path: Path) -> None:
    first = make_backend(server, tmp_path, environ=OLD, lease_ttl_s=2)
    for i in range(2):
        await first.start_lane(i, lane_spec())
    await first.close()  # killed mid-run: no teardown, its Lease stops being renewed
    killed_at = time.monotonic()
    left = lane_objects(server)
    assert {"pods/n8n-lane-20261202-contract-0-0", "pods/n8n-lane-20261202-contract-1-0"} <= left

    second = make_backend(server, tmp_path, environ=NEW, takeover=True)  # same run id, same state dir
    lanes = [await second.start_lane(i, lane_spec()) for i in range(2)]
    waited = time.monotonic() - killed_at
    assert waited >= 2  # the old Lease (TTL 2 s) had to run out and stay unrenewed a TTL first
    assert [lane.handle for lane in lanes] == ["n8n-lane-20261202-contract-0-1", "n8n-lane-20261202-contract-1-1"]
    now = lane_objects(server)
    assert not {o for o in left if o.startswith("pods/")} & now  # the old lanes are gone
    lease = server.get("leases", NS, k8s.lease_name(RUN_ID))
    assert lease is not None and lease["spec"]["holderIdentity"] == second.holder
    pods = [server.get("pods", NS, lane.handle) for lane in lanes]
    assert all(p is not None and p["metadata"]["ownerReferences"][0]["name"] == NEW["POD_NAME"] for p in pods)
    # the shared ledger: the old pod's lane entries were closed by the takeover
    assert {e.id for e in second.ledger.open_entries("lane")} == {lane.handle for lane in lanes}
    for lane in lanes:
        await second.teardown(lane)
    await second.close()
    assert lane_objects(server) == set()  # the resumed run's end leaves no object of either pod
    assert second.ledger.open_entries() == []


async def test_a_resumed_run_with_nothing_left_to_run_still_removes_what_the_old_pod_left(
    server: FakeApiServer, tmp_path: Path,
) -> None:
    """The old pod finished its last unit and died before its teardown: the resumed run starts no
    lane, so no Lease create meets the old one; the leftovers go all the same, once the old Lease
    ran out, and the ledger is left with nothing open (else: clean-up failures, exit 1)."""
    first = make_backend(server, tmp_path, environ=OLD, lease_ttl_s=2)
    for i in range(2):
        await first.start_lane(i, lane_spec())
    await first.close()
    killed_at = time.monotonic()
    assert lane_objects(server) and first.ledger.open_entries()
    second = make_backend(server, tmp_path, environ=NEW, takeover=True)
    await second.take_over_leftovers()
    assert time.monotonic() - killed_at >= 2  # the old Lease (TTL 2 s) ran out first
    assert lane_objects(server) == set() and second.ledger.open_entries() == []
    before = len(server.api_calls())
    await second.take_over_leftovers()  # nothing open: nothing asked of the API
    assert len(server.api_calls()) == before
    await second.close()


async def test_a_live_holder_is_a_collision_not_a_takeover(server: FakeApiServer, tmp_path: Path) -> None:
    first = make_backend(server, tmp_path, environ=OLD, lease_ttl_s=2)  # renews every 2/3 s
    await first.start_lane(0, lane_spec())
    before = lane_objects(server)
    second = make_backend(server, tmp_path / "elsewhere", environ=NEW, takeover=True)
    try:
        with pytest.raises(ConfigError, match=r"nightly-7-old-\w+, which still renews its Lease"):
            await second.start_lane(0, lane_spec())
        assert lane_objects(server) == before  # nothing of the live run touched
    finally:
        await second.close()
        await first.close()


async def test_resume_existing_resumes_a_run_whose_state_survived(tmp_path: Path) -> None:
    """What the chart's nightly pod runs (``--run-id <job name> --resume-existing``): the first pod
    starts the run; a replacement pod of the same Job, finding the run's state on the volume, resumes
    it (so the backend takes over its lanes, above); without ``--run-id`` it is a one-line error."""
    from orchestrator.run.config import RunConfig
    from orchestrator.run.plan import make_plan
    from orchestrator.run.resolve import resolve

    cases = tmp_path / "cases"  # one case of ours
    cases.mkdir()
    shutil.copy(Path(__file__).resolve().parents[4] / "cases" / "smoke-manual-set-static-fields.json", cases)
    common = dict(cases_paths=[cases], state_dir=tmp_path / "state", model_server="scripted", resume_existing=True)
    first_cfg = RunConfig(**common, run_id="nightly-7", output_dir=tmp_path / "out-old-pod")
    first_run = resolve(first_cfg)
    first = await make_plan(first_run)
    assert first_run.config.resume is None and first.run_id == "nightly-7"
    first.lock.release()  # the old pod is gone
    second_cfg = RunConfig(**common, run_id="nightly-7", output_dir=tmp_path / "out-new-pod")
    second_run = resolve(second_cfg)
    second = await make_plan(second_run)
    second.lock.release()
    assert second_run.config.resume == "nightly-7" and second.run_id == "nightly-7"
    assert second.output_dir == tmp_path / "out-old-pod"  # the run's results stay where they began
    with pytest.raises(ConfigError, match="--resume-existing: needs --run-id"):
        resolve(RunConfig(**common))
