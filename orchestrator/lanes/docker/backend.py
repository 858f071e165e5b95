"""The ``docker`` backend: one n8n container per lane, on host networking.

Containers run the lane image (``LaneSpec.image``, or ``ORCHESTRATOR_LANE_IMAGE`` when set; built by
``lanes/build-image.sh``) on the dockerd
at the ``docker_host`` option, else ``DOCKER_HOST``, else the private socket ``scripts/dockerd.sh``
starts. That dockerd has no default bridge, so every lane uses **host networking**, binds n8n to
127.0.0.1 and gets its own pair of loopback ports:

- ``N8N_PORT`` (the editor, REST API, MCP server, ``/healthz``) and
- ``N8N_RUNNERS_BROKER_PORT`` (the task broker; its default 5679 collides between lanes).

Those are the only fixed ports n8n 2.41.1 opens with the eval modules: the JS task runner reaches
the broker at ``127.0.0.1:<broker port>``, the runner's own health server (5681) and the queue
health server are off unless enabled, the ``engine-v2`` control plane (3000/3001) runs only when
that module is enabled, and the eval LLM-mock wire server binds an ephemeral port.

Ports: lane ``i`` asks :func:`orchestrator.lanes.ports.reserve_ports` for two ports searching up
from ``spec.base_port + 2*i`` — predictable numbers (``base+2i`` and ``base+2i+1``) when they are
free, the next free ones otherwise, never a port another lane of this process holds.

Names and labels: the container (and, with ``user_folder_volume``, its named volume) is
``n8n-eval-<run_id>-<index>``, labelled ``app.kubernetes.io/managed-by=n8n-eval-orchestrator``,
``n8n-eval/run-id=<run_id>`` and ``n8n-eval/lane-index=<index>``; ``sweep`` finds leftovers by those
labels (and by the ledger). By default the n8n user folder lives in the container's writable layer
and goes with the container.

The container is created, recorded in the ledger, and only then started. Its environment is
``spec.env`` + ``spec.secret_env`` + the lane's ports; secret values are registered for redaction
and never logged. Every blocking Docker SDK call runs in a worker thread.

Options (keyword options of the backend):

====================  ==========================================================  ============
option                meaning                                                     default
====================  ==========================================================  ============
docker_host           dockerd URL                                                 $DOCKER_HOST or unix:///run/n8n-eval-docker.sock
user_folder_volume    keep the user folder in a labelled named volume             False
apply_limits          map ``spec.resources`` limits to memory / CPU limits        True
stop_timeout_s        SIGTERM grace before SIGKILL at teardown                    10
api_timeout_s         read timeout of one Docker API call                         120
sandbox               an embedded Instance AI sandbox service per lane            False
sandbox_url           an external n8n-sandbox for every lane instead              None
sandbox_api_key       its key (else ``N8N_SANDBOX_SERVICE_API_KEY``)              None
cache                 the toolchain cache the embedded sandbox runs from          the default cache
====================  ==========================================================  ============

Sandbox: with host networking the embedded sandbox service runs **on the host**, bound to
127.0.0.1, and the lane's n8n reaches it at the same URL. Its lifecycle is the process backend's
(:class:`orchestrator.sandbox.lanes.LaneSandboxes`): started (and recorded in the ledger as kind
``sandbox``) before the container is created, stopped — every jail killed, every workspace removed —
after the container is removed, and swept from the ledger after a crash.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import docker
import httpx
from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from docker.models.containers import Container

from orchestrator.lanes.backend import LaneBackend, LaneError, answers_ready, register_backend
from orchestrator.lanes.docker.options import DockerOptions
from orchestrator.lanes.labels import LANE_INDEX_ENV, LANE_INDEX_LABEL, MANAGED_BY, MANAGED_BY_LABEL, RUN_ENV, RUN_LABEL
from orchestrator.lanes.model import Lane, LaneSpec, LaneState, Resources
from orchestrator.lanes.ports import release_ports, reserve_ports
from orchestrator.ledger import Ledger, all_runs, run_dir
from orchestrator.redact import redact, register_secret
from orchestrator.sandbox.lanes import LaneSandboxes, sweep_recorded
from orchestrator.toolchain import Toolchain, default_cache_dir

log = logging.getLogger(__name__)

DEFAULT_DOCKER_HOST = "unix:///run/n8n-eval-docker.sock"
INDEX_LABEL = LANE_INDEX_LABEL
USER_FOLDER = "/home/n8n"
_NAME_OK = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")


#: The lane image to run instead of ``LaneSpec.image`` (the kubernetes backend reads the same variable).
LANE_IMAGE_ENV = "ORCHESTRATOR_LANE_IMAGE"


def lane_image(spec: LaneSpec) -> str:
    """The image lanes of ``spec`` run: ``ORCHESTRATOR_LANE_IMAGE`` when set, else ``spec.image``."""
    return os.environ.get(LANE_IMAGE_ENV) or spec.image


def docker_host(option: object = None) -> str:
    """The dockerd URL to use: the option, else ``DOCKER_HOST``, else ours (scripts/dockerd.sh)."""
    return str(option or os.environ.get("DOCKER_HOST") or DEFAULT_DOCKER_HOST)


def container_name(run_id: str, index: int) -> str:
    """The name of lane ``index``'s container: ``n8n-eval-<run>-<index>``."""
    return f"n8n-eval-{run_id}-{index}"


def lane_labels(run_id: str, index: int | None = None) -> dict[str, str]:
    """The labels that find a run's containers (and, with ``index``, one lane's) for sweeps."""
    labels = {MANAGED_BY_LABEL: MANAGED_BY, RUN_LABEL: run_id}
    if index is not None:
        labels[INDEX_LABEL] = str(index)
    return labels


def label_filter(run_id: str | None) -> list[str]:
    """Docker ``label`` filters (ANDed) for our resources of ``run_id``, or of every run when None."""
    filters = [f"{MANAGED_BY_LABEL}={MANAGED_BY}"]
    if run_id is not None:
        filters.append(f"{RUN_LABEL}={run_id}")
    return filters


def _quantity(quantity: str, field: str, example: str, *, positive: bool) -> Decimal:
    from kubernetes.utils import parse_quantity  # the Kubernetes client's own quantity grammar

    try:
        value: Decimal = parse_quantity(quantity.strip())  # unannotated in the client; a Decimal
    except ValueError:
        raise LaneError(f"resources.{field} {quantity!r} is not a quantity like {example}") from None
    if value < 0 or (positive and value == 0):
        raise LaneError(f"resources.{field} {quantity!r} must be positive")
    return value


def memory_bytes(quantity: str) -> int:
    """A Kubernetes memory quantity (``2Gi``, ``512Mi``, ``1G``) in bytes."""
    value = _quantity(quantity, "memory_limit", "2Gi or 512Mi", positive=False)
    if value != value.to_integral_value():  # "1m" of memory is a millibyte: surely a typo
        raise LaneError(f"resources.memory_limit {quantity!r} is not a whole number of bytes")
    return int(value)


def nano_cpus(quantity: str) -> int:
    """A Kubernetes CPU quantity (``2``, ``1.5``, ``500m``) in units of 1e-9 CPUs."""
    return int(_quantity(quantity, "cpu_limit", "2 or 500m", positive=True) * 10**9)


@dataclass(frozen=True)
class LanePorts:
    http: int
    broker: int


def lane_environment(spec: LaneSpec, ports: LanePorts) -> dict[str, str]:
    """What the lane container sees: the spec's env and secrets, then the lane's own ports."""
    env = dict(spec.env)
    env.update(spec.secret_env)
    env.setdefault("N8N_HOST", "127.0.0.1")
    env.update(
        N8N_PORT=str(ports.http),
        N8N_LISTEN_ADDRESS="127.0.0.1",
        N8N_RUNNERS_BROKER_PORT=str(ports.broker),
        N8N_RUNNERS_BROKER_LISTEN_ADDRESS="127.0.0.1",
        N8N_USER_FOLDER=USER_FOLDER,
    )
    return env


@register_backend
class DockerBackend(LaneBackend):
    name = "docker"
    options_model = DockerOptions
    co_located = True  # one local dockerd, host networking
    supports_sandbox = True  # on the host, reached over host networking (see the module docstring)

    @classmethod
    def preflight(cls, spec: LaneSpec) -> None:
        """The lane image exists; else a one-line ``ConfigError`` naming the command that builds it."""
        check_lane_image(lane_image(spec))  # a missing image: one line naming the command that builds it

    def __init__(self, run_id: str, ledger: Ledger, state_dir: Path, **options: object) -> None:
        super().__init__(run_id, ledger, state_dir, **options)
        if not _NAME_OK.match(run_id):
            raise LaneError(f"run id {run_id!r} cannot name a container: use letters, digits, '.', '_' or '-'")
        opts = self.config
        assert isinstance(opts, DockerOptions)
        self.docker_host = docker_host(opts.docker_host)
        self.user_folder_volume = opts.user_folder_volume
        self.apply_limits = opts.apply_limits
        self.stop_timeout_s = opts.stop_timeout_s
        self.api_timeout_s = opts.api_timeout_s
        self._client: docker.DockerClient | None = None
        self._client_lock = asyncio.Lock()
        self._ports: dict[str, LanePorts] = {}
        self._http = httpx.AsyncClient(timeout=5.0)
        self.toolchain = Toolchain(opts.cache or default_cache_dir())
        # options sandbox=True / sandbox_url=...: one Instance AI sandbox per lane (None: as before)
        self._sandboxes = LaneSandboxes.from_options(opts.model_dump(), ledger, self.toolchain, self.sandboxes_dir())

    def sandboxes_dir(self) -> Path:
        """Where this run's lane sandboxes keep their state."""
        return run_dir(self.state_dir, self.run_id) / "sandboxes"

    def _lane_sandboxes(self) -> LaneSandboxes:
        """Ours, or one that stops a sandbox known only from the ledger (a crashed run's)."""
        return self._sandboxes or LaneSandboxes(self.ledger, self.toolchain, self.sandboxes_dir())

    # -- connection ---------------------------------------------------------------------------

    async def client(self) -> docker.DockerClient:
        """The Docker client, connected on first use (once, whoever asks first)."""
        async with self._client_lock:
            if self._client is None:
                self._client = await asyncio.to_thread(self._connect)
            return self._client

    def _connect(self) -> docker.DockerClient:
        try:
            client = docker.DockerClient(base_url=self.docker_host, timeout=self.api_timeout_s)
            client.ping()
        except DockerException as exc:
            raise LaneError(
                f"cannot reach dockerd at {self.docker_host} (docker_host option / DOCKER_HOST): {exc}; "
                "start one with `scripts/dockerd.sh start`"
            ) from None
        return client

    # -- lifecycle ----------------------------------------------------------------------------

    async def start_lane(self, index: int, spec: LaneSpec) -> Lane:
        """Start lane ``index``'s container (a stale one of the same name removed first) on reserved ports,
        with the spec's env, limits and, when asked, a sandbox; recorded in the ledger."""
        client = await self.client()
        name = container_name(self.run_id, index)
        image_ref = lane_image(spec)
        image = await self._image(client, image_ref)
        limits = self._limits(spec.resources) if self.apply_limits else {}
        await self._remove_stale(client, name)
        for value in spec.secret_env.values():
            register_secret(value)
        http, broker = reserve_ports(2, start=spec.base_port + 2 * index)
        ports = LanePorts(http, broker)
        lane = Lane(
            lane_id=name,
            index=index,
            base_url=f"http://127.0.0.1:{ports.http}",
            backend=self.name,
            run_id=self.run_id,
            state=LaneState.starting,
            handle=name,
        )
        labels = lane_labels(self.run_id, index)
        environment = lane_environment(spec, ports)
        if self._sandboxes is not None:
            try:
                environment.update(await self._sandboxes.start(name, {RUN_ENV: self.run_id, LANE_INDEX_ENV: str(index)}))
            except RuntimeError as exc:
                release_ports([ports.http, ports.broker])
                raise LaneError(f"{lane.describe()}: sandbox service: {exc}") from exc
        kwargs: dict[str, Any] = dict(
            image=image.id,
            name=name,
            labels=labels,
            environment=environment,
            network_mode="host",
            init=True,  # tini as PID 1: signals reach n8n, the task-runner child is reaped
            detach=True,
            stop_signal="SIGTERM",
            **limits,
        )
        volume = name if self.user_folder_volume else ""
        try:
            if volume:
                await asyncio.to_thread(client.volumes.create, name=volume, labels=labels)
                kwargs["volumes"] = {volume: {"bind": USER_FOLDER, "mode": "rw"}}
            container: Container = await asyncio.to_thread(client.containers.create, **kwargs)
        except APIError as exc:
            release_ports([ports.http, ports.broker])
            if volume:
                await self._remove_volume(client, volume)
            await self._lane_sandboxes().stop(name)
            raise LaneError(f"{lane.describe()}: docker could not create the container: {_explain(exc)}") from None
        self._ports[name] = ports
        self.ledger.created(
            "lane", name, lane=name, backend=self.name, index=index, container_id=container.id,
            container_name=name, volume=volume, image=image_ref, image_id=image.id,
            docker_host=self.docker_host, port=ports.http, broker_port=ports.broker, base_url=lane.base_url,
        )
        lane.fingerprint = {"image": image_ref, "image_id": image.id}
        try:
            await asyncio.to_thread(container.start)
        except APIError as exc:
            raise LaneError(f"{lane.describe()}: docker could not start the container: {_explain(exc)}") from None
        log.info("%s: container %s started from %s", lane.describe(), container.short_id, image_ref)
        return lane

    async def _image(self, client: docker.DockerClient, ref: str) -> Any:
        try:
            return await asyncio.to_thread(client.images.get, ref)
        except ImageNotFound:
            raise LaneError(
                f"lane image {ref!r} (LaneSpec.image) is not on dockerd {self.docker_host}: build it with "
                f"`{image_build_hint(ref)}`"
            ) from None

    async def _remove_stale(self, client: docker.DockerClient, name: str) -> None:
        """A container (or volume) left under this lane's name by an earlier attempt of the same run
        goes first, so a replacement lane never inherits an old user folder."""
        try:
            old = await asyncio.to_thread(client.containers.get, name)
        except NotFound:
            pass
        else:
            if old.labels.get(MANAGED_BY_LABEL) != MANAGED_BY or old.labels.get(RUN_LABEL) != self.run_id:
                raise LaneError(f"a container named {name} exists and is not a lane of run {self.run_id}: remove it first")
            log.warning("removing stale container %s of an earlier attempt", name)
            await self._remove_container(client, name)
        if self.user_folder_volume:
            await self._remove_volume(client, name)

    @staticmethod
    def _limits(resources: Resources) -> dict[str, Any]:
        return {"mem_limit": memory_bytes(resources.memory_limit), "nano_cpus": nano_cpus(resources.cpu_limit)}

    async def _container(self, lane: Lane) -> Container | None:
        client = await self.client()
        try:
            return await asyncio.to_thread(client.containers.get, lane.handle or lane.lane_id)
        except NotFound:
            return None

    async def health(self, lane: Lane) -> bool:
        try:
            container = await self._container(lane)
        except (DockerException, LaneError):
            return False
        if container is None or container.status != "running":
            return False
        return await answers_ready(self._http, lane.base_url)

    async def is_gone(self, lane: Lane) -> bool:
        try:
            container = await self._container(lane)
        except (DockerException, LaneError):
            return False
        return container is None or container.status in ("exited", "dead")

    async def logs(self, lane: Lane, lines: int = 40) -> str:
        try:
            container = await self._container(lane)
            if container is None:
                return ""
            raw: bytes = await asyncio.to_thread(container.logs, tail=lines)
        except (DockerException, LaneError):
            return ""
        return redact(raw.decode("utf-8", errors="replace").rstrip("\n"))

    async def teardown(self, lane: Lane) -> None:
        client = await self.client()
        ref = lane.handle or lane.lane_id  # container name (our handle) or id (a lane rebuilt from the ledger)
        try:
            await self._remove_container(client, ref)
            if self.user_folder_volume:  # normally removed with the container; this catches a lost one
                await self._remove_volume(client, lane.lane_id)
        except APIError as exc:
            raise LaneError(f"{lane.describe()}: docker could not remove container {ref}: {_explain(exc)}") from None
        await self._lane_sandboxes().stop(lane.lane_id)  # the lane's sandbox, if it had one: no-op otherwise
        ports = self._ports.pop(lane.lane_id, None)
        if ports is not None:
            release_ports([ports.http, ports.broker])
        lane.state = LaneState.stopped
        self.ledger.deleted("lane", lane.lane_id, lane=lane.lane_id)

    async def _remove_container(self, client: docker.DockerClient, ref: str) -> list[str]:
        """Stop (SIGTERM, SIGKILL after the grace) and remove the container with its volumes.

        Returns what went (``container <name>``, ``volume <name>``); empty when it was already gone
        or is not ours (no managed-by label). Named volumes go too when they carry our labels.
        """
        try:
            container = await asyncio.to_thread(client.containers.get, ref)
        except NotFound:
            return []
        if container.labels.get(MANAGED_BY_LABEL) != MANAGED_BY:
            log.warning("container %s is not labelled %s=%s: left alone", ref, MANAGED_BY_LABEL, MANAGED_BY)
            return []
        volumes = [m["Name"] for m in container.attrs.get("Mounts") or [] if m.get("Type") == "volume" and m.get("Name")]
        try:
            if container.status == "running":
                await asyncio.to_thread(container.stop, timeout=self.stop_timeout_s)
            await asyncio.to_thread(container.remove, force=True, v=True)
        except NotFound:
            return []
        removed = [f"container {container.name}"]
        for name in volumes:
            if await self._remove_volume(client, name):
                removed.append(f"volume {name}")
        return removed

    async def _remove_volume(self, client: docker.DockerClient, name: str) -> bool:
        """Remove one of *our* named volumes (labelled managed-by us); False if gone or not ours."""
        try:
            volume = await asyncio.to_thread(client.volumes.get, name)
            if (volume.attrs.get("Labels") or {}).get(MANAGED_BY_LABEL) != MANAGED_BY:
                return False
            await asyncio.to_thread(volume.remove, force=True)
        except NotFound:
            return False
        return True

    async def sweep(self, run_id: str | None = None) -> list[str]:
        """Remove our containers and volumes of ``run_id`` (every run when None), by label and by ledger."""
        client = await self.client()
        removed: list[str] = []
        filters: dict[str, str | list[str] | bool] = {"label": label_filter(run_id)}
        containers = await asyncio.to_thread(client.containers.list, all=True, filters=filters)
        for c in containers:
            # a listed (not sparse) container has its name read; the id stands in should one not
            removed += await self._remove_container(client, c.name or c.short_id)
        for ledger in self._ledgers(run_id):
            for entry in ledger.open_entries("lane"):
                if entry.meta.get("backend") != self.name:
                    continue
                removed += await self._remove_container(client, str(entry.meta.get("container_name") or entry.id))
                if entry.meta.get("volume") and await self._remove_volume(client, str(entry.meta["volume"])):
                    removed.append(f"volume {entry.meta['volume']}")
                ledger.deleted("lane", entry.id, lane=entry.lane)
        volumes = await asyncio.to_thread(client.volumes.list, filters=filters)
        for v in volumes:
            if await self._remove_volume(client, v.name):
                removed.append(f"volume {v.name}")
        removed += await sweep_recorded([lg.run_dir for lg in self._ledgers(run_id)])  # sandboxes on the host
        return removed

    def _ledgers(self, run_id: str | None) -> list[Ledger]:
        ledgers = all_runs(self.state_dir)
        if run_id is not None:
            ledgers = [lg for lg in ledgers if lg.run_id == run_id]
        if run_id in (None, self.run_id) and self.ledger.path.exists() and all(
            lg.path.resolve() != self.ledger.path.resolve() for lg in ledgers
        ):
            ledgers.append(self.ledger)
        return ledgers

    async def close(self) -> None:
        await self._http.aclose()
        if self._client is not None:
            await asyncio.to_thread(self._client.close)
            self._client = None


def _explain(exc: APIError) -> str:
    return redact(str(exc.explanation or exc))


def image_build_hint(ref: str) -> str:
    """The one command that builds a missing lane image (base image included)."""
    tag = "" if ref == "n8n-eval-lane:local" else f" --tag {ref}"
    return f"bash lanes/build-image.sh --from-cache{tag}"


def check_lane_image(ref: str, host: str | None = None) -> None:
    """Before a docker run starts anything: the dockerd answers and has the lane image. One-line
    :class:`~orchestrator.errors.ConfigError` naming the command that fixes it otherwise."""
    from orchestrator.errors import ConfigError

    url = docker_host(host)
    try:
        client = docker.DockerClient(base_url=url, timeout=10)
    except DockerException as exc:
        raise ConfigError(f"--backend docker: no dockerd at {url} ({type(exc).__name__}): start one with "
                          "`bash scripts/dockerd.sh start` or set DOCKER_HOST") from None
    try:
        client.images.get(ref)
    except ImageNotFound:
        raise ConfigError(f"--backend docker: lane image {ref!r} is not on dockerd {url}: build it with "
                          f"`{image_build_hint(ref)}`") from None
    except DockerException as exc:
        raise ConfigError(f"--backend docker: no dockerd at {url} ({type(exc).__name__}): start one with "
                          "`bash scripts/dockerd.sh start` or set DOCKER_HOST") from None
    finally:
        client.close()
