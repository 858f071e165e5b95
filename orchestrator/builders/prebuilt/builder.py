"""The ``prebuilt`` builder: score workflows that already exist on the lane instead of building.

``orchestrator run --prebuilt-workflows manifest.json`` (the reference's flag) maps case slugs to
workflow ids on one static lane; iteration ``i`` of a case scores ``ids[i % len(ids)]``::

    {"contact-form-automation": ["W1abc", "W2def"], "deduplication-trigger": ["W4jkl"]}

Each build copies the listed workflow (as the lane owner reads it) into the build user's own
project and returns the copy: the unit is verified and cleaned up exactly like a built one (the
copy goes with the build user), and the manifest's workflow is never modified. With
``--delete-prebuilt-workflows`` the workflows of the manifest that were used successfully are
deleted once, after the run (:meth:`PrebuiltBuilder.aclose`): the manifest must not be reused.

The manifest and the two flags are checked before anything starts (:func:`validate_prebuilt`):
every error is one line naming the flag. Either flag selects this builder when the run names the
default one (``selected_by``).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from orchestrator.builders.builder import (
    Builder,
    BuilderOptions,
    BuilderReport,
    BuildRequest,
    BuildResult,
    register_builder,
)
from orchestrator.builders.lane import BuildLane
from orchestrator.builders.prebuilt.options import PrebuiltOptions
from orchestrator.builders.users import BuildUser
from orchestrator.domain import BuildStatus
from orchestrator.errors import ConfigError
from orchestrator.n8n.errors import N8nError, N8nTransportError
from orchestrator.redact import redact

log = logging.getLogger(__name__)

FLAG = "--prebuilt-workflows"
DELETE_FLAG = "--delete-prebuilt-workflows"
#: The workflow fields a copy keeps (what n8n accepts on create; ids, owners, versions are new).
COPIED_FIELDS = ("name", "nodes", "connections", "settings", "staticData", "pinData", "meta")


def load_manifest(path: Path) -> dict[str, list[str]]:
    """``{slug: [workflow id, …]}`` from ``path``; a :class:`ConfigError` naming the flag otherwise."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{FLAG}: {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{FLAG}: cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{FLAG}: {path} is not JSON: {exc.msg} (line {exc.lineno})") from None
    if not isinstance(data, dict) or not data:
        raise ConfigError(f"{FLAG}: {path} must be an object mapping case slugs to lists of workflow ids")
    manifest: dict[str, list[str]] = {}
    for slug, ids in data.items():
        if isinstance(ids, str):
            ids = [ids]
        if not isinstance(ids, list) or not ids or not all(isinstance(i, str) and i.strip() for i in ids):
            raise ConfigError(f"{FLAG}: {path}: {slug!r} must map to a non-empty list of workflow ids (strings)")
        manifest[str(slug)] = [i.strip() for i in ids]
    return manifest


def validate_prebuilt(options: PrebuiltOptions) -> None:
    """The flag rules, checked before anything starts (``PrebuiltBuilder.check_config``). That the
    workflows live on one lane someone else runs is the stack's rule (``needs_existing_lane``)."""
    if options.delete_prebuilt_workflows and options.prebuilt_workflows is None:
        raise ConfigError(f"{DELETE_FLAG}: only with {FLAG}")
    if options.prebuilt_workflows is None:
        raise ConfigError(f"--builder prebuilt: needs {FLAG} manifest.json")
    if options.delete_prebuilt_workflows and options.keep_workflows:
        raise ConfigError(f"{DELETE_FLAG}: mutually exclusive with --keep-workflows")
    load_manifest(options.prebuilt_workflows)


def check_manifest_slugs(manifest: dict[str, list[str]], selected: list[str], known: list[str]) -> None:
    """Every manifest slug is a case that exists, and every selected case is in the manifest."""
    unknown = sorted(set(manifest) - set(known))
    if unknown:
        raise ConfigError(f"{FLAG}: unknown case slug(s) {', '.join(repr(s) for s in unknown[:5])}"
                          f"{' …' if len(unknown) > 5 else ''}: no such case")
    missing = sorted(set(selected) - set(manifest))
    if missing:
        raise ConfigError(f"{FLAG}: selected case(s) {', '.join(repr(s) for s in missing[:5])} have no workflow in "
                          "the manifest: narrow the run with --filter / --exclude")


def workflow_for(manifest: dict[str, list[str]], slug: str, iteration: int) -> str:
    """The manifest workflow iteration ``iteration`` of ``slug`` scores (cycling through its ids)."""
    ids = manifest[slug]
    return ids[iteration % len(ids)]


@register_builder
class PrebuiltBuilder(Builder):
    name = "prebuilt"
    process_gradable = False  # no chat: outcome expectations only (n8n: the prebuilt path)
    needs_mcp_key = False

    needs_existing_lane = True
    options_model = PrebuiltOptions
    selected_by = ("prebuilt_workflows", "delete_prebuilt_workflows")

    checks_cases = True

    @classmethod
    def check_config(cls, options: BuilderOptions | None) -> None:
        """The ``--prebuilt-workflows`` options are valid (``ConfigError`` naming the flag otherwise)."""
        validate_prebuilt(options if isinstance(options, PrebuiltOptions) else PrebuiltOptions.model_validate({}))

    @classmethod
    def check_cases(cls, options: BuilderOptions | None, selected: list[str], known: list[str]) -> None:
        """The manifest names only known cases and has a workflow for every selected one (``ConfigError``
        naming the slugs at fault)."""
        if isinstance(options, PrebuiltOptions) and options.prebuilt_workflows is not None:
            check_manifest_slugs(load_manifest(options.prebuilt_workflows), selected, known)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        options = self.settings.options
        if not isinstance(options, PrebuiltOptions) or options.prebuilt_workflows is None:
            raise ConfigError(f"--builder prebuilt: needs {FLAG} manifest.json")
        self.manifest = load_manifest(options.prebuilt_workflows)
        self.delete_after = options.delete_prebuilt_workflows
        #: manifest workflow id → the lane it lives on, for each one scored successfully
        self.used: dict[str, BuildLane] = {}
        self.deleted: list[str] = []
        self.delete_failures: list[str] = []

    async def build(self, request: BuildRequest, lane: BuildLane, user: BuildUser) -> BuildResult:
        """Copy the case's manifest workflow into ``user``'s project and score the copy; a case without one
        or a workflow that cannot be read is a framework fault."""
        slug = request.case_slug
        if slug not in self.manifest:
            return BuildResult(status=BuildStatus.failed, framework_fault=True, attempts=1,
                               error=f"{FLAG}: no workflow for case {slug!r} in the manifest")
        source_id = workflow_for(self.manifest, slug, request.iteration)
        try:
            original = await lane.owner.get_workflow(source_id)
        except N8nTransportError:
            raise
        except N8nError as exc:
            return BuildResult(status=BuildStatus.failed, framework_fault=True, attempts=1,
                               error=redact(f"prebuilt workflow {source_id} ({slug}) cannot be read on "
                                            f"{lane.lane.lane_id}: {exc}"))
        body = {k: original[k] for k in COPIED_FIELDS if original.get(k) is not None}
        body["name"] = f"{original.get('name') or source_id} [prebuilt {source_id} #{request.iteration}]"
        copy_id = await user.session.create_workflow(body)
        self.used[source_id] = lane
        log.info("%s #%d: scoring prebuilt workflow %s as %s", slug, request.iteration, source_id, copy_id)
        return BuildResult(status=BuildStatus.ok, workflow_id=copy_id, attempts=1, root_cause=None)

    async def aclose(self) -> None:
        """``--delete-prebuilt-workflows``: delete each manifest workflow used successfully, once."""
        if not self.delete_after:
            return
        from orchestrator.n8n.rest import N8nClient

        by_lane: dict[str, list[str]] = {}
        lanes: dict[str, BuildLane] = {}
        for workflow_id, lane in self.used.items():
            by_lane.setdefault(lane.lane.lane_id, []).append(workflow_id)
            lanes[lane.lane.lane_id] = lane
        for lane_id, ids in by_lane.items():
            lane = lanes[lane_id]
            owner_login = lane.lane.owner
            if owner_login is None:
                continue
            try:
                async with N8nClient(lane.lane.base_url) as client:  # the run's owner session is closed by now
                    owner = await client.login(owner_login.email, owner_login.password)
                    try:
                        for workflow_id in ids:
                            try:
                                await owner.delete_workflow(workflow_id)
                                self.deleted.append(workflow_id)
                            except N8nError as exc:
                                self.delete_failures.append(redact(f"{lane_id}: delete prebuilt {workflow_id}: {exc}"))
                    finally:
                        await owner.aclose()
            except N8nError as exc:
                self.delete_failures.append(redact(f"{lane_id}: cannot log in to delete prebuilt workflows: {exc}"))
        for failure in self.delete_failures:
            log.warning("%s", failure)
        if self.deleted:
            log.info("deleted %d prebuilt workflow(s): %s", len(self.deleted), ", ".join(self.deleted))

    def closing_report(self) -> BuilderReport:
        """The prebuilt workflows deleted after the run, and those that could not be."""
        deleted = f"deleted {len(self.deleted)} prebuilt workflow(s): {', '.join(self.deleted)}"
        return BuilderReport(notes=(deleted,) if self.deleted else (), cleanup_failures=tuple(self.delete_failures))
