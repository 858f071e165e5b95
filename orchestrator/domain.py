"""The shared ground's domain types: what a build, a verdict and a cleanup can be.

Every stage speaks of these (builders return a :class:`BuildStatus`, the verifier a
:class:`Verdict` with an :class:`Attribution`, the ledger, deletion and teardown a
:class:`ResourceKind` and :class:`CleanupFailure`), so they live below every package: importing
one never pulls in a stage. ``results.model`` re-exports ``Attribution``, ``BuildStatus`` and
``Verdict`` with the records that use them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Attribution(str, enum.Enum):
    """Who a failure is charged to (the four buckets of the reference harness)."""

    builder_issue = "builder_issue"
    mock_issue = "mock_issue"
    framework_issue = "framework_issue"
    verification_gap = "verification_gap"


class BuildStatus(str, enum.Enum):
    ok = "ok"
    failed = "failed"  # claude ran but produced no workflow id after every attempt
    timeout = "timeout"
    provider_outage = "provider_outage"
    lane_failure = "lane_failure"
    skipped = "skipped"  # not started: spend cap reached or run interrupted


PROVIDER_OUTAGE_ROOT_CAUSE = "provider_outage:"


class Verdict(str, enum.Enum):
    passed = "pass"
    failed = "fail"
    incomplete = "incomplete"  # not judged: excluded from scoring


class ResourceKind(str, enum.Enum):
    """What the ledger records and teardown deletes."""

    lane = "lane"
    sandbox = "sandbox"
    user = "user"
    credential = "credential"
    workflow = "workflow"
    agent = "agent"
    thread = "thread"
    data_table = "data_table"
    folder = "folder"
    project = "project"
    secret = "secret"
    service = "service"
    networkpolicy = "networkpolicy"
    lease = "lease"
    process = "process"
    container = "container"
    pod = "pod"
    volume = "volume"
    build_dir = "build_dir"
    other = "other"

    @classmethod
    def of(cls, value: str) -> ResourceKind:
        try:
            return cls(value)
        except ValueError:
            return cls.other


@dataclass(frozen=True)
class CleanupFailure:
    """A resource that teardown or cleanup could not delete (it stays open in the ledger)."""

    kind: ResourceKind
    id: str
    lane: str
    reason: str  # a whole sentence naming the resource, e.g. "delete workflow 12: … → 500: …"

    def __str__(self) -> str:
        return f"{self.lane}: {self.reason}" if self.lane else self.reason
