"""Run metrics for Prometheus (scrape endpoint or Pushgateway)."""

from orchestrator.metrics.prometheus import MetricsEndpoint, RunMetrics

__all__ = ["MetricsEndpoint", "RunMetrics"]
