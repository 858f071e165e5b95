"""Which lane runs which (case, iteration): a work-stealing allocator with lane quarantine."""

from .model import (
    AllocatorEvent,
    AllocatorStats,
    EventKind,
    LaneStats,
    Outcome,
    ResultStatus,
    WorkResult,
    WorkUnit,
)
from .work_stealing import Allocator, Probe, Worker

__all__ = [
    "Allocator",
    "AllocatorEvent",
    "AllocatorStats",
    "EventKind",
    "LaneStats",
    "Outcome",
    "Probe",
    "ResultStatus",
    "WorkResult",
    "WorkUnit",
    "Worker",
]
