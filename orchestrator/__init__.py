"""Containerized multi-lane orchestrator for evaluating n8n's Instance AI workflow builder."""

__version__ = "0.1.0"
