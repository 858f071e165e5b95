"""Evaluation cases: the case schema, its load-time rules, where cases come from and how a run
selects them."""

from orchestrator.cases.credentials import SUPPORTED_CREDENTIAL_TYPES, CredentialSpec
from orchestrator.cases.issues import CaseIssue, CaseLoadError
from orchestrator.cases.model import (
    DEFAULT_DATASETS,
    PRE_UNION_SEED_KEYS,
    Attachment,
    EvalCase,
    ExecutionScenario,
    Turn,
)
from orchestrator.cases.parse import parse_case, parse_case_text
from orchestrator.cases.rules import agent_slug, director_notes, strip_director_notes
from orchestrator.cases.seed import (
    InlineSeed,
    PriorRun,
    ReplaySeed,
    SeedAgent,
    SeedDataTable,
    SeedFolder,
    SeedMessage,
    SeedProject,
    SeedWorkflow,
    seed_slot,
)
from orchestrator.cases.selection import (
    CASE_SOURCES,
    DEFAULT_CASES_DIR,
    load_cases,
    load_selected,
    select_cases,
)
from orchestrator.cases.sources import LoadedCase, load_disk, load_langtracer, parse_export

__all__ = [
    "CASE_SOURCES",
    "DEFAULT_CASES_DIR",
    "DEFAULT_DATASETS",
    "PRE_UNION_SEED_KEYS",
    "SUPPORTED_CREDENTIAL_TYPES",
    "Attachment",
    "CaseIssue",
    "CaseLoadError",
    "CredentialSpec",
    "EvalCase",
    "ExecutionScenario",
    "InlineSeed",
    "LoadedCase",
    "PriorRun",
    "ReplaySeed",
    "SeedAgent",
    "SeedDataTable",
    "SeedFolder",
    "SeedMessage",
    "SeedProject",
    "SeedWorkflow",
    "Turn",
    "agent_slug",
    "director_notes",
    "load_cases",
    "load_disk",
    "load_langtracer",
    "load_selected",
    "parse_case",
    "parse_case_text",
    "parse_export",
    "seed_slot",
    "select_cases",
    "strip_director_notes",
]
