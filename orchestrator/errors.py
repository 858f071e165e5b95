"""One error tree for the whole orchestrator.

``OrchestratorError`` is the root of every error the orchestrator raises on purpose. The CLI prints
any of them as one line (``error: …``) and exits 2; only a bug (anything else) is a traceback.
Whether trying again can help is part of the type: ``transient`` is a class attribute that retry
policies read (:func:`is_transient`), never a string match. A class that callers also catch by a
built-in type keeps that base beside its node (``RunnerError`` is a ``RuntimeError``,
``NotEvalResults`` a ``ValueError``, ``ResultsWriteError`` an ``OSError``).

The whole tree (``tests/unit/test_errors.py`` checks that every exception class of the package is in it
and drawn here)::

    OrchestratorError
    ├── UserError                     bad input: a flag, an env var, a file; the message names it
    │   ├── ConfigError               a flag or environment value out of range or unknown
    │   ├── UnknownCredentialType     builders.credentials: a case names a credential type n8n lacks
    │   ├── NotEvalResults            results.contract (also ValueError): a file that is no results
    │   ├── _DuplicateKeys            cases.parse: a case file repeats a key
    │   └── _NotJson                  cases.parse: a case file is not JSON
    ├── CaseLoadError                 cases.issues: cases failed to load (each issue names its file)
    ├── InstallError                  toolchain: n8n, Node or claude could not be installed
    ├── LaneError                     lanes.backend: a lane could not be started, reached or stopped
    │   └── LeaseLost                 lanes.kubernetes.lease: another process holds the run's Lease
    ├── N8nError                      n8n.errors: a call to a lane's n8n failed
    │   ├── N8nTransportError         no answer (transient)
    │   └── N8nHTTPError              an HTTP error status
    │       ├── N8nBadRequest, N8nUnauthorized, N8nForbidden, N8nNotFound, N8nConflict
    │       ├── N8nRateLimited        (transient)
    │       └── N8nServerError        (transient)
    ├── ResultsWriteError             results.writer (also OSError): results could not be written
    ├── HarnessError                  the harness could not do its part: the unit is a framework fault
    │   ├── SeedUnsupported           builders.seeds: a seed n8n 2.41.1 cannot restore
    │   ├── SeedRestoreFailed         builders.seeds: the restore answered with the wrong thing
    │   ├── ScenarioSeedFailed        handoff: a scenario's rows could not be seeded
    │   ├── ScenarioTablesRefused     builders.instance_ai.scenario_tables
    │   ├── ReplayUnavailable         builders.instance_ai.replay_seed: a replay seed cannot be rebuilt
    │   ├── GatewayError              builders.instance_ai.credential_setup.gateway
    │   └── SandboxError              an Instance AI sandbox could not serve
    │       ├── IsolationError        sandbox.isolation (also RuntimeError): no bubblewrap here
    │       ├── SandboxServiceError   sandbox.service (also RuntimeError)
    │       ├── TemplateError         sandbox.template (also RuntimeError)
    │       └── HttpError             sandbox.files: a refused request (its status)
    ├── BuildError                    a build ended other than by its builder's answer
    │   ├── BuildTimedOut             builders.instance_ai.builder: a budget ran out
    │   ├── UserRunRefused            builders.instance_ai.user_run: the user run broke a rule
    │   ├── ToolError                 builders.instance_ai.credential_setup.browser: a refused tool call
    │   └── RunnerError               builders.claude.build_runner (also RuntimeError)
    │       ├── RunnerUnreachable     no answer from the build runner
    │       └── RunnerDeadline        the runner did not finish by the deadline
    ├── ModelCallError                a model call (judge, panel, gateway) gave no usable answer
    │   ├── _UnusableReply            verify.judge: not the verdict list asked for
    │   ├── IntentBlockError          verify.intent (also ValueError): not a classification
    │   ├── PanelFailed               harnesses.pairwise.panel: a judge gave no verdict
    │   └── _Refused                  gateway.proxy: held longer than the gateway holds calls
    └── VirtualClockDeadlock          allocator.virtual_clock (also RuntimeError): the program would hang

Outside the tree on purpose: ``lanes.process.launcher.LaneGone``, in a script that runs without
importing the orchestrator (``python -I launcher.py``).
"""

from __future__ import annotations

from typing import ClassVar


class OrchestratorError(Exception):
    """Root of the orchestrator's own errors. ``transient``: the same call may succeed later."""

    transient: ClassVar[bool] = False


class UserError(OrchestratorError):
    """Bad input: a flag, an env var, a file. The message names the input at fault."""


class ConfigError(UserError):
    """A flag or environment value is out of range or unknown."""


class HarnessError(OrchestratorError):
    """The harness could not do its part of a unit (a seed, a fixture, a sandbox): the unit is a
    framework fault, never the builder's."""


class SandboxError(HarnessError):
    """An Instance AI sandbox could not be prepared, started or could not serve a request."""


class BuildError(OrchestratorError):
    """A build ended other than by its builder's own answer (a budget, a runner, a refused rule);
    the builder turns it into its ``BuildResult``."""


class ModelCallError(OrchestratorError):
    """A model call (a judge, a panel, the gateway's provider) gave no usable answer."""


def is_transient(exc: BaseException) -> bool:
    """True when the error says trying again may help (the retry policies' one question)."""
    return bool(getattr(exc, "transient", False))
