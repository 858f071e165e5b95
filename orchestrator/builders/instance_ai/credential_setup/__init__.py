"""n8n's credential-setup lane for ``credentialFixture`` cases, offline: the provider fixture
(:mod:`.fixture_server`), the agent's browser (:mod:`.browser`), the computer-use gateway that
serves it (:mod:`.gateway`) and one build's facts (:mod:`.setup`)."""

from orchestrator.builders.instance_ai.credential_setup.setup import CredentialSetup, LeakWatch, lane_lock

__all__ = ["CredentialSetup", "LeakWatch", "lane_lock"]
