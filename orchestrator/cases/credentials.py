"""Credentials a case declares: created for real before the build and pinned as the build's
entire credential view.

The type is any credential type the pinned n8n defines. n8n's own schema checks it against its
seeder's hand-kept templates; here the placeholder data is derived at run time from the lane's own
credential type definitions (``builders/credentials.py``), so a new type needs no code — the one
place this loader accepts more than n8n's (``docs/n8n-corpus.md``). A type the pinned n8n does not
define is refused at load, naming the nearest known one (:mod:`orchestrator.cases.credential_types`).

Like n8n's schema, an entry is a plain (non-strict) object: keys it does not know are dropped.
"""

from __future__ import annotations

from pydantic import ConfigDict, Field, StrictBool, field_validator

from orchestrator.cases.base import CaseModel
from orchestrator.cases.credential_types import unknown_type_message

#: Credential types with a hand-written template (live ``EVAL_*`` values; verified field names).
#: Every other type gets placeholder data derived from the lane's type definition.
SUPPORTED_CREDENTIAL_TYPES: frozenset[str] = frozenset(
    {
        "slackApi",
        "notionApi",
        "githubApi",
        "gmailOAuth2",
        "microsoftTeamsOAuth2Api",
        "whatsAppTriggerApi",
        "httpHeaderAuth",
        "httpBasicAuth",
        "openAiApi",
    }
)

#: Same cap n8n applies to a credential description (it is sent to the model with the list).
CREDENTIAL_DESCRIPTION_MAX_LENGTH = 512


class CredentialSpec(CaseModel):
    model_config = ConfigDict(extra="ignore")

    type: str = Field(min_length=1)
    name: str | None = Field(default=None, min_length=1)
    description: str | None = None
    #: False declares a credential whose connection test must fail for real.
    valid: StrictBool = True
    #: True declares a credential the user saved without filling anything in: created with empty
    #: fields, and (like ``valid: false``) its connection test is not bypassed.
    blank: StrictBool = False

    @field_validator("type")
    @classmethod
    def _known_type(cls, value: str) -> str:
        problem = unknown_type_message(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("description")
    @classmethod
    def _trim_description(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip()
        if len(value) > CREDENTIAL_DESCRIPTION_MAX_LENGTH:
            raise ValueError(
                f"credential description cannot be longer than "
                f"{CREDENTIAL_DESCRIPTION_MAX_LENGTH} characters (got {len(value)})"
            )
        return value or None

    @property
    def connected(self) -> bool:
        """Whether the credential stands for one the user already connected (its test passes)."""
        return self.valid and not self.blank
