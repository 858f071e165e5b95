"""The model gateway: every model call of a run through one rate-aware proxy.

- :mod:`~orchestrator.gateway.proxy` — the loopback server: forwards, streams back, retries once,
  holds calls while the provider is down, accounts for every call;
- :mod:`~orchestrator.gateway.control` — its rules: the build concurrency (the allocator's global
  cap), the mirror of the provider's rate limits, whether the provider is up;
- :mod:`~orchestrator.gateway.attribution` — whose call it is (unit) and what for (stage);
- :mod:`~orchestrator.gateway.ledger` — the calls, summed per unit and stage;
- :mod:`~orchestrator.gateway.prices` — the price table and the cost of a usage, cache-aware;
- :mod:`~orchestrator.gateway.usage_reader` — a call's usage, read from the bytes that go by.
"""

from orchestrator.gateway.attribution import Leases, UnitScope, unit_scope
from orchestrator.gateway.control import ConcurrencyRule
from orchestrator.gateway.ledger import CallLedger, CallRecord, StageTally
from orchestrator.gateway.prices import Usage, cost_usd
from orchestrator.gateway.proxy import GatewayConfig, GatewayEvents, ModelGateway, Upstream

__all__ = [
    "CallLedger",
    "CallRecord",
    "ConcurrencyRule",
    "GatewayConfig",
    "GatewayEvents",
    "Leases",
    "ModelGateway",
    "StageTally",
    "UnitScope",
    "Upstream",
    "Usage",
    "cost_usd",
    "unit_scope",
]
