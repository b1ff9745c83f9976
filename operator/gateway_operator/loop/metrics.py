"""Prometheus metrics of the operator (served by ``gateway-operator run --metrics-port``).

The per-GatewayDeployment series live in one small record per object and are rendered at
scrape time by a collector: prometheus_client's labelled children cost a lock and a value
object per series (about 27 KiB per GatewayDeployment here, 27 MiB at 1,000), a record
about 1 KiB. The names, labels and types are those of ordinary counters, a gauge and a
histogram.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Iterable, Iterator, Mapping

from prometheus_client.core import REGISTRY, CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

_LABELS = ["namespace", "name"]
# prometheus_client's default buckets (seconds)
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, float("inf"))
_STATUSES = ("True", "False", "Unknown")


class _Series:
    """The counters of one GatewayDeployment. Written from the event loop only; a scrape
    (another thread) reads them, and a float read is atomic under the GIL."""

    __slots__ = ("reconciles", "errors", "writes", "restarts", "polls", "conditions", "buckets",
                 "duration_sum", "duration_count", "cut_offs", "out_of_traffic")

    def __init__(self) -> None:
        self.reconciles = self.errors = self.writes = self.restarts = 0.0
        self.polls: dict[str, float] = {}
        self.conditions: tuple[tuple[str, str], ...] = ()
        self.buckets = [0] * len(BUCKETS)  # non-cumulative counts
        self.duration_sum = 0.0
        self.duration_count = 0
        self.cut_offs = 0.0        # replicas the readiness gate took out of the traffic, since the start
        self.out_of_traffic = 0.0  # ... and out now


_series: dict[tuple[str, str], _Series] = {}
_shards: dict[int, float] = {}   # with --shards: 1 for each shard this replica holds, 0 for the others
_shard_members = [0.0]           # ... and the live members it counted
_lock = threading.Lock()  # guards adding and removing records, not their values
LAG_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, float("inf"))
_lag = [0] * len(LAG_BUCKETS)   # non-cumulative counts of the event loop's ticks (loop_lag.py)
_lag_sum = [0.0]
# how many GatewayDeployments found settled wait for their loop to start (supervisor.py sets it)
_waiting: list[Callable[[], int]] = [lambda: 0]


def _of(namespace: str, name: str) -> _Series:
    key = (namespace, name)
    series = _series.get(key)
    if series is None:
        with _lock:
            series = _series.setdefault(key, _Series())
    return series


def reconciled(namespace: str, name: str, writes: int) -> None:
    s = _of(namespace, name)
    s.reconciles += 1
    s.writes += writes


def reconcile_took(namespace: str, name: str, seconds: float) -> None:
    s = _of(namespace, name)
    s.buckets[next(i for i, bound in enumerate(BUCKETS) if seconds <= bound)] += 1
    s.duration_sum += seconds
    s.duration_count += 1


def reconcile_failed(namespace: str, name: str) -> None:
    _of(namespace, name).errors += 1


def wrote(namespace: str, name: str, writes: int = 1) -> None:
    _of(namespace, name).writes += writes


def polled(namespace: str, name: str, results: Iterable[str]) -> None:
    polls = _of(namespace, name).polls
    for result in results:
        polls[result] = polls.get(result, 0.0) + 1


def restarted_stale_replica(namespace: str, name: str) -> None:
    _of(namespace, name).restarts += 1


def traffic_gated(namespace: str, name: str, taken_out: int, out_now: int) -> None:
    s = _of(namespace, name)
    s.cut_offs += taken_out
    s.out_of_traffic = float(out_now)


def observe_conditions(namespace: str, name: str, conditions: Iterable[Mapping[str, Any]]) -> None:
    # Every counter of a known GatewayDeployment is exposed from its first pass on, at 0: a
    # counter series that appears at 1 hides its first increase from rate()/increase(), and
    # a dashboard panel over a series that does not exist is empty rather than 0.
    _of(namespace, name).conditions = tuple((str(c["type"]), str(c["status"])) for c in conditions)


def forget(namespace: str, name: str) -> None:
    """Drop the series of a deleted GatewayDeployment."""
    with _lock:
        _series.pop((namespace, name), None)


def loop_lagged(seconds: float) -> None:
    """One tick of loop_lag.py, ``seconds`` late."""
    _lag[next(i for i, bound in enumerate(LAG_BUCKETS) if seconds <= bound)] += 1
    _lag_sum[0] += seconds


def _cumulative(bounds: Iterable[float], counts: Iterable[int]) -> list[tuple[str, int]]:
    cumulative, running = [], 0
    for bound, count in zip(bounds, list(counts)):
        running += count
        cumulative.append(("+Inf" if bound == float("inf") else repr(bound), running))
    return cumulative


def waiting_from(count: Callable[[], int]) -> None:
    """Where the count of loops waiting their turn is read at each scrape."""
    _waiting[0] = count


def shards_held(shards: int, held: Iterable[int], members: int) -> None:
    mine = set(held)
    _shards.update({s: 1.0 if s in mine else 0.0 for s in range(shards)})
    _shard_members[0] = float(members)


class _PerObjectCollector(Collector):
    def collect(self) -> Iterator[Any]:
        with _lock:
            snapshot = list(_series.items())
        reconciles = CounterMetricFamily("gateway_operator_reconciles", "Full reconcile passes.", labels=_LABELS)
        errors = CounterMetricFamily("gateway_operator_reconcile_errors", "Reconcile steps that failed unexpectedly.",
                                     labels=_LABELS)
        writes = CounterMetricFamily("gateway_operator_api_writes", "Writes sent to the API server.", labels=_LABELS)
        polls = CounterMetricFamily("gateway_operator_health_polls", "GET /health results by replica state.",
                                    labels=[*_LABELS, "result"])
        restarts = CounterMetricFamily("gateway_operator_stale_replica_restarts",
                                       "Replicas restarted to leave the build-time SQLite fallback.", labels=_LABELS)
        cut_offs = CounterMetricFamily("gateway_operator_replicas_cut_off",
                                       "Replicas taken out of the traffic (readiness gate) because they could not reach "
                                       "Redis while another replica could.", labels=_LABELS)
        out_now = GaugeMetricFamily("gateway_operator_replicas_out_of_traffic",
                                    "Replicas out of the traffic now (readiness gate False): cut off from Redis.",
                                    labels=_LABELS)
        condition = GaugeMetricFamily("gateway_operator_condition", "1 for the current status of each condition.",
                                      labels=[*_LABELS, "type", "status"])
        durations = HistogramMetricFamily("gateway_operator_reconcile_duration_seconds",
                                          "Duration of full reconciles.", labels=_LABELS)
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
                for status in _STATUSES:
                    condition.add_metric([*labels, type_, status], 1.0 if current == status else 0.0)
            if s.duration_count:
                durations.add_metric(labels, _cumulative(BUCKETS, s.buckets), s.duration_sum)
        yield from (reconciles, errors, writes, polls, restarts, cut_offs, out_now, condition, durations)
        yield GaugeMetricFamily("gateway_operator_loops_waiting", "GatewayDeployments found settled together (an "
                                "operator start, a shard taken over) whose loop waits its turn to start; each "
                                "starts at once on a change of its own.", value=float(_waiting[0]()))
        if any(_lag):
            lag = HistogramMetricFamily("gateway_operator_event_loop_lag_seconds",
                                        "How late the operator's event loop woke a tick due every 0.5 s: above a "
                                        "second for long, the process cannot keep up with what it holds.")
            lag.add_metric([], _cumulative(LAG_BUCKETS, _lag), _lag_sum[0])
            yield lag
        if _shards:
            held = GaugeMetricFamily("gateway_operator_shard_held", "1 for each shard this operator replica holds "
                                     "(--shards): it reconciles the GatewayDeployments of those.", labels=["shard"])
            for shard, value in sorted(_shards.items()):
                held.add_metric([str(shard)], value)
            yield held
            yield GaugeMetricFamily("gateway_operator_shard_members", "Operator replicas this one counts live "
                                    "(their member Leases renewed).", value=_shard_members[0])


REGISTRY.register(_PerObjectCollector())
