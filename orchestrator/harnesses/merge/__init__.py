"""``orchestrator merge``: the seed's ``merge-results`` for sharded runs."""
