"""The ledger's in-memory index: what is open, across writers, torn lines and failed deletes."""

from __future__ import annotations

from pathlib import Path

from orchestrator.domain import ResourceKind
from orchestrator.ledger import Ledger


def test_open_entries_follow_creates_deletes_and_failed_deletes(tmp_path: Path) -> None:
    ledger = Ledger.for_run("r1", tmp_path)
    ledger.created("lane", "p0", lane="p0", backend="process")
    ledger.created(ResourceKind.workflow, "wf1", lane="p0")
    ledger.created("user", "u1", lane="p0")
    ledger.deleted("user", "u1", lane="p0")
    ledger.delete_failed("workflow", "wf1", "boom", lane="p0")
    open_ = {(e.kind, e.id): e for e in ledger.open_entries()}
    assert set(open_) == {("lane", "p0"), ("workflow", "wf1")}
    assert open_[("workflow", "wf1")].last_error == "boom"
    assert [e.id for e in ledger.open_entries(ResourceKind.workflow)] == ["wf1"]


def test_a_second_reader_sees_appends_of_another_writer(tmp_path: Path) -> None:
    writer = Ledger.for_run("r2", tmp_path)
    reader = Ledger.for_run("r2", tmp_path)
    writer.created("lane", "p0", lane="p0")
    assert [e.id for e in reader.open_entries()] == ["p0"]
    writer.created("workflow", "w", lane="p0")
    writer.deleted("lane", "p0", lane="p0")
    assert [(e.kind, e.id) for e in reader.open_entries()] == [("workflow", "w")]


def test_a_torn_last_line_is_skipped_until_it_is_complete(tmp_path: Path) -> None:
    ledger = Ledger.for_run("r3", tmp_path)
    ledger.created("lane", "p0", lane="p0")
    with ledger.path.open("a") as fh:  # a SIGKILL mid-write leaves half a line
        fh.write('{"op": "create", "kind": "user", "id": "u9"')
    fresh = Ledger.for_run("r3", tmp_path)
    assert [e.id for e in fresh.open_entries()] == ["p0"]
    with ledger.path.open("a") as fh:
        fh.write(', "lane": "p0"}\n')
    assert {e.id for e in fresh.open_entries()} == {"p0", "u9"}
