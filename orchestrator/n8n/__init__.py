"""Client for one n8n lane: REST (:mod:`.rest`), its errors and the owner it seeds."""

from orchestrator.n8n.errors import N8nError, N8nHTTPError, N8nTransportError
from orchestrator.n8n.invitations import Invitation
from orchestrator.n8n.mock_execution import MockExecutionResult
from orchestrator.n8n.rest import N8nClient, N8nSession, RetryPolicy

__all__ = [
    "Invitation",
    "MockExecutionResult",
    "N8nClient",
    "N8nError",
    "N8nHTTPError",
    "N8nSession",
    "N8nTransportError",
    "RetryPolicy",
]
