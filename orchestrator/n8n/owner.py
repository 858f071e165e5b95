"""The owner (and the other users) ``POST /rest/e2e/reset`` seeds on a lane."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class OwnerCredentials:
    """The e2e owner seeded by ``POST /rest/e2e/reset``. The password is a secret: never log it."""

    email: str
    password: str = field(repr=False)
    first_name: str = "Eval"
    last_name: str = "Owner"
