"""Credentials a case declares: created for real before the build and pinned as the build's
entire credential view. Only types with a seeding template are accepted."""

from __future__ import annotations

from pydantic import Field, field_validator

from orchestrator.cases.base import NestedCaseModel

#: Credential types the seeder has a data template for (the reference harness's closed set).
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


class CredentialSpec(NestedCaseModel):
    type: str
    name: str | None = Field(default=None, min_length=1)
    description: str | None = None
    #: False declares a credential whose connection test must fail for real.
    valid: bool = True

    @field_validator("type")
    @classmethod
    def _known_type(cls, value: str) -> str:
        if value not in SUPPORTED_CREDENTIAL_TYPES:
            supported = ", ".join(sorted(SUPPORTED_CREDENTIAL_TYPES))
            raise ValueError(
                f"unsupported credential type {value!r}: add a seeding template for it "
                f"(supported: {supported})"
            )
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
