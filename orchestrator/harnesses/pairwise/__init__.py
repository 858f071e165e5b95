"""``orchestrator pairwise`` and its folder tools (``pairwise-compare``, ``pairwise-upload``)."""
