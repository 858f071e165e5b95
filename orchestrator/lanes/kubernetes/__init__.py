"""The ``kubernetes`` lane backend: one pod per lane in a cluster (``backend``), and what it stands on."""
