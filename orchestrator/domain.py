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
    """Who a failure is charged to: the four buckets of the reference harness, and ``timeout``
    (n8n's ``EVAL_ATTRIBUTIONS``, ``harness/attribution.ts``): every row of an iteration whose
    conversation a budget ended carries it and is ``incomplete`` — graded and recorded, counted
    neither as a pass nor as a failure."""

    builder_issue = "builder_issue"
    mock_issue = "mock_issue"
    framework_issue = "framework_issue"
    verification_gap = "verification_gap"
    timeout = "timeout"


#: The four buckets a failure can be charged to (a judge or the harness picks one of these).
FAILURE_BUCKETS = (Attribution.builder_issue, Attribution.mock_issue, Attribution.framework_issue,
                   Attribution.verification_gap)


class BuildStatus(str, enum.Enum):
    ok = "ok"
    failed = "failed"  # claude ran but produced no workflow id after every attempt
    timeout = "timeout"
    provider_outage = "provider_outage"
    lane_failure = "lane_failure"
    skipped = "skipped"  # not started: spend cap reached or run interrupted


#: n8n's marker on the root cause of a build a provider outage ended (``harness/transient-error.ts``):
#: the row's ``rootCause`` is ``"<marker>: <evidence>"``; LangTracer's older readers key on the prefix
PROVIDER_OUTAGE_ROOT_CAUSE = ("Model provider was unavailable during the build (transient upstream 5xx/429), "
                              "so the agent produced no output")
#: n8n's failure category for every row of a timed-out iteration (``run/case-pipeline.ts``
#: ``attachExpectations``; ``KNOWN_FAILURE_CATEGORIES`` in ``comparison/compare.ts``)
BUILD_TIMEOUT_CATEGORY = "build_timeout"


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
        """The kind named ``value``; ``other`` for a name this version does not know (an old ledger's)."""
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
