"""Prometheus metrics of the operator (served by ``gateway-operator run --metrics-port``)."""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from prometheus_client import Counter, Gauge, Histogram

_LABELS = ("namespace", "name")

RECONCILES = Counter("gateway_operator_reconciles_total", "Full reconcile passes.", _LABELS)
RECONCILE_ERRORS = Counter("gateway_operator_reconcile_errors_total",
                           "Reconcile steps that failed unexpectedly.", _LABELS)
RECONCILE_SECONDS = Histogram("gateway_operator_reconcile_duration_seconds", "Duration of full reconciles.",
                              _LABELS)
API_WRITES = Counter("gateway_operator_api_writes_total", "Writes sent to the API server.", _LABELS)
HEALTH_POLLS = Counter("gateway_operator_health_polls_total", "GET /health results by replica state.",
                       (*_LABELS, "result"))
STALE_RESTARTS = Counter("gateway_operator_stale_replica_restarts_total",
                         "Replicas restarted to leave the build-time SQLite fallback.", _LABELS)
CONDITION = Gauge("gateway_operator_condition", "1 for the current status of each condition.",
                  (*_LABELS, "type", "status"))


def observe_conditions(namespace: str, name: str, conditions: Iterable[Mapping[str, Any]]) -> None:
    # The counters that may stay at zero for a long time exist from the first pass on: a
    # counter series that appears at 1 hides its first increase from rate()/increase(), and
    # a dashboard panel over a series that does not exist is empty rather than 0.
    RECONCILE_ERRORS.labels(namespace, name)
    STALE_RESTARTS.labels(namespace, name)
    for c in conditions:
        for status in ("True", "False", "Unknown"):
            CONDITION.labels(namespace, name, c["type"], status).set(1 if c["status"] == status else 0)


def forget(namespace: str, name: str) -> None:
    """Drop the series of a deleted GatewayDeployment."""
    for metric in (RECONCILES, RECONCILE_ERRORS, RECONCILE_SECONDS, API_WRITES, STALE_RESTARTS):
        try:
            metric.remove(namespace, name)
        except KeyError:
            pass
    for labels in list(CONDITION._metrics):  # no public API lists a gauge's children
        if labels[:2] == (namespace, name):
            CONDITION.remove(*labels)
    for labels in list(HEALTH_POLLS._metrics):
        if labels[:2] == (namespace, name):
            HEALTH_POLLS.remove(*labels)
