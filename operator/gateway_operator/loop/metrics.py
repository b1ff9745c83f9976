"""Prometheus metrics of the operator (served by ``gateway-operator run --metrics-port``).

The per-GatewayDeployment series live in one small record per object and are written at
scrape time straight into the text format (``per_object_text``): prometheus_client's labelled
children cost a lock and a value object per series (about 27 KiB per GatewayDeployment here,
27 MiB at 1,000), a record about 1 KiB; and its metric families took 0.69 s of CPU per scrape at
1,500 GatewayDeployments, on the scrape's thread while the event loop waited for the GIL, where
the direct text takes 0.04 s (``bench/metrics_render.py``). The names, labels, types and bytes
are those prometheus_client writes for ordinary counters, a gauge and a histogram
(tests/unit/test_metrics.py). The operator-wide families go through prometheus_client; ``serve``
answers a scrape with both.
"""
from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterable, Iterator, Mapping

from prometheus_client import generate_latest
from prometheus_client.core import REGISTRY, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

# a sample value, as generate_latest writes it (prometheus_client leaves the function unannotated:
# its type declared here)
_number: Callable[[float], str] = floatToGoString

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


def pass_ended(namespace: str, name: str, applied: bool, writes: int, seconds: float, failed: bool) -> None:
    """A pass's count: a pass that applied (a full one) its duration and writes; one that failed, an error."""
    if applied:
        reconcile_took(namespace, name, seconds)
        reconciled(namespace, name, writes)
    if failed:
        reconcile_failed(namespace, name)


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


#: the per-GatewayDeployment families: (name as exposed, type, help), in the order they are served
FAMILIES = (
    ("gateway_operator_reconciles_total", "counter", "Full reconcile passes."),
    ("gateway_operator_reconcile_errors_total", "counter", "Reconcile steps that failed unexpectedly."),
    ("gateway_operator_api_writes_total", "counter", "Writes sent to the API server."),
    ("gateway_operator_health_polls_total", "counter", "GET /health results by replica state."),
    ("gateway_operator_stale_replica_restarts_total", "counter",
     "Replicas restarted to leave the build-time SQLite fallback."),
    ("gateway_operator_replicas_cut_off_total", "counter",
     "Replicas taken out of the traffic (readiness gate) because they could not reach Redis while another "
     "replica could."),
    ("gateway_operator_replicas_out_of_traffic", "gauge",
     "Replicas out of the traffic now (readiness gate False): cut off from Redis."),
    ("gateway_operator_condition", "gauge", "1 for the current status of each condition."),
    ("gateway_operator_reconcile_duration_seconds", "histogram", "Duration of full reconciles."),
)
_LE = tuple("+Inf" if bound == float("inf") else repr(bound) for bound in BUCKETS)


def _label(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')


def per_object_text() -> str:
    """The per-GatewayDeployment families in the text exposition format, as prometheus_client
    would write them from metric families (labels sorted by name), written directly (the module's
    docstring says why)."""
    with _lock:
        snapshot = list(_series.items())
    labels = [f'name="{_label(name)}",namespace="{_label(namespace)}"' for (namespace, name), _ in snapshot]
    records = [s for _, s in snapshot]
    out: list[str] = []

    def family(index: int) -> None:
        name, kind, help_ = FAMILIES[index]
        out.append(f"# HELP {name} {help_}\n# TYPE {name} {kind}\n")

    def one_each(index: int, field: str) -> None:   # a family of one series per GatewayDeployment
        family(index)
        name = FAMILIES[index][0]
        out.extend(f"{name}{{{label}}} {_number(getattr(s, field))}\n" for label, s in zip(labels, records))

    for index, field in enumerate(("reconciles", "errors", "writes")):
        one_each(index, field)
    family(3)
    for label, s in zip(labels, records):
        out.extend(f'gateway_operator_health_polls_total{{{label},result="{_label(result)}"}} {_number(count)}\n'
                   for result, count in list(s.polls.items()))
    for index, field in ((4, "restarts"), (5, "cut_offs"), (6, "out_of_traffic")):
        one_each(index, field)
    family(7)
    for label, s in zip(labels, records):
        for type_, current in s.conditions:
            type_ = _label(type_)
            out.extend(f'gateway_operator_condition{{{label},status="{status}",type="{type_}"}} '
                       f'{"1.0" if current == status else "0.0"}\n' for status in _STATUSES)
    family(8)
    for label, s in zip(labels, records):
        if not s.duration_count:
            continue
        running = 0
        for le, count in zip(_LE, list(s.buckets)):
            running += count
            out.append(f'gateway_operator_reconcile_duration_seconds_bucket{{le="{le}",{label}}} {_number(running)}\n')
        out.append(f"gateway_operator_reconcile_duration_seconds_count{{{label}}} {_number(running)}\n"
                   f"gateway_operator_reconcile_duration_seconds_sum{{{label}}} {_number(s.duration_sum)}\n")
    return "".join(out)


class _OperatorCollector(Collector):
    """The operator-wide families, through prometheus_client (a few series)."""

    def collect(self) -> Iterator[Any]:
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


REGISTRY.register(_OperatorCollector())


class _Scrape(BaseHTTPRequestHandler):
    """Any GET: prometheus_client's families (the process's, the operator-wide ones), then the
    per-GatewayDeployment ones (``per_object_text``), in the text format 0.0.4."""

    def do_GET(self) -> None:
        body = generate_latest(REGISTRY) + per_object_text().encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:   # a scrape is not news
        pass


class _MetricsServer(ThreadingHTTPServer):
    daemon_threads = True


class _MetricsServer6(_MetricsServer):
    address_family = socket.AF_INET6


def serve(port: int, address: str = "0.0.0.0") -> ThreadingHTTPServer:
    """Serves the metrics on ``address``:``port`` from a daemon thread (as
    prometheus_client.start_http_server did); returns the server."""
    server = (_MetricsServer6 if ":" in address else _MetricsServer)((address, port), _Scrape)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
