"""The ``docker`` lane backend: one container per lane on the local Docker daemon."""
