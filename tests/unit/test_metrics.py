"""The operator's metrics endpoint (loop/metrics.py): the per-GatewayDeployment families are written
directly (``per_object_text``) instead of through prometheus_client's metric families, so a scrape
of thousands of GatewayDeployments does not hold the interpreter for most of a second. What a
scraper reads must not change: the text is compared byte for byte with what prometheus_client
writes from the same records as metric families (the operator's former collector, kept here as
the reference), and the served endpoint is parsed by prometheus_client's own parser."""
from __future__ import annotations

import urllib.request
from typing import Any, Iterator

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from gateway_operator.core import conditions as C
from gateway_operator.loop import metrics

LABELS = ["namespace", "name"]


class _Reference(Collector):
    """The per-GatewayDeployment families as prometheus_client's metric families (the operator's
    collector before it wrote them directly)."""

    def collect(self) -> Iterator[Any]:
        snapshot = list(metrics._series.items())
        reconciles = CounterMetricFamily("gateway_operator_reconciles", "Full reconcile passes.", labels=LABELS)
        errors = CounterMetricFamily("gateway_operator_reconcile_errors", "Reconcile steps that failed unexpectedly.",
                                     labels=LABELS)
        writes = CounterMetricFamily("gateway_operator_api_writes", "Writes sent to the API server.", labels=LABELS)
        polls = CounterMetricFamily("gateway_operator_health_polls", "GET /health results by replica state.",
                                    labels=[*LABELS, "result"])
        restarts = CounterMetricFamily("gateway_operator_stale_replica_restarts",
                                       "Replicas restarted to leave the build-time SQLite fallback.", labels=LABELS)
        cut_offs = CounterMetricFamily("gateway_operator_replicas_cut_off",
                                       "Replicas taken out of the traffic (readiness gate) because they could not reach "
                                       "Redis while another replica could.", labels=LABELS)
        out_now = GaugeMetricFamily("gateway_operator_replicas_out_of_traffic",
                                    "Replicas out of the traffic now (readiness gate False): cut off from Redis.",
                                    labels=LABELS)
        condition = GaugeMetricFamily("gateway_operator_condition", "1 for the current status of each condition.",
                                      labels=[*LABELS, "type", "status"])
        durations = HistogramMetricFamily("gateway_operator_reconcile_duration_seconds",
                                          "Duration of full reconciles.", labels=LABELS)
        for (namespace, name), s in snapshot:
            labels = [namespace, name]
            reconciles.add_metric(labels, s.reconciles)
            errors.add_metric(labels, s.errors)
            writes.add_metric(labels, s.writes)
            restarts.add_metric(labels, s.restarts)
            cut_offs.add_metric(labels, s.cut_offs)
            out_now.add_metric(labels, s.out_of_traffic)
            for result, count in list(s.polls.items()):
                polls.add_metric([*labels, result], count)
            for type_, current in s.conditions:
                for status in ("True", "False", "Unknown"):
                    condition.add_metric([*labels, type_, status], 1.0 if current == status else 0.0)
            if s.duration_count:
                durations.add_metric(labels, metrics._cumulative(metrics.BUCKETS, s.buckets), s.duration_sum)
        yield from (reconciles, errors, writes, polls, restarts, cut_offs, out_now, condition, durations)


@pytest.fixture
def records() -> Iterator[None]:
    saved = dict(metrics._series)
    metrics._series.clear()
    try:
        yield
    finally:
        metrics._series.clear()
        metrics._series.update(saved)


def _fill() -> None:
    metrics.observe_conditions("team-a", "bot", [{"type": t, "status": s} for t, s in
                                                 zip(C.ORDER, ["True", "False", "Unknown"] * 4)])
    metrics.polled("team-a", "bot", ["healthy", "degraded", "healthy", "unreachable"])
    for seconds in (0.003, 0.2, 0.2, 7.0, 12345.0):
        metrics.reconcile_took("team-a", "bot", seconds)
    metrics.reconciled("team-a", "bot", 12_345_678)   # a count Go writes with an exponent
    metrics.reconcile_failed("team-a", "bot")
    metrics.traffic_gated("team-a", "bot", 2, 1)
    metrics.restarted_stale_replica("team-a", "bot")
    metrics.observe_conditions("team-b", 'odd"name\\with\nescapes', [{"type": "Ready", "status": "True"}])
    metrics.polled("team-b", 'odd"name\\with\nescapes', ["healthy"])
    metrics.wrote("team-c", "never-reconciled")   # no duration yet: no histogram series


def test_the_written_families_are_what_prometheus_client_writes_from_the_same_records(records) -> None:
    _fill()
    registry = CollectorRegistry()
    registry.register(_Reference())
    assert metrics.per_object_text() == generate_latest(registry).decode()


def test_no_gateway_deployment_writes_only_the_families_headers(records) -> None:
    registry = CollectorRegistry()
    registry.register(_Reference())
    assert metrics.per_object_text() == generate_latest(registry).decode()


def test_the_served_endpoint_parses_with_every_family_once(records) -> None:
    _fill()
    server = metrics.serve(0, "127.0.0.1")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_address[1]}/metrics", timeout=10) as r:
            assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            text = r.read().decode()
    finally:
        server.shutdown()
        server.server_close()
    families = [f.name for f in text_string_to_metric_families(text)]
    assert len(families) == len(set(families))
    parsed = {f.name: f for f in text_string_to_metric_families(text)}
    ready = [s for s in parsed["gateway_operator_condition"].samples
             if s.labels == {"namespace": "team-a", "name": "bot", "type": "Ready", "status": "True"}]
    assert [s.value for s in ready] == [1.0]
    assert {"gateway_operator_loops_waiting", "gateway_operator_reconcile_duration_seconds",
            "process_cpu_seconds"} <= set(parsed)
