"""``promtool check metrics`` over what the operator's metrics endpoint serves (loop/metrics.py).

test_metrics.py checks that the text parses and that the per-GatewayDeployment families are the
bytes prometheus_client would write; it does not check that the names, HELP and TYPE lines follow
Prometheus's conventions (a counter ends in _total, base units such as _seconds and _bytes, no
camelCase, no _count/_sum/_bucket on what is not a histogram, a HELP on every family...). Those are
what dashboards, alert rules and users' queries are written against, and a family added without
them is costly to fix once it ships (a rename breaks every query). So the real linter, the pinned
promtool (hack/versions.env, built by hack/build-binaries.sh --monitoring, as for the rule tests
of tests/sim/test_monitoring.py), reads a scrape of the served endpoint with realistic records: several
GatewayDeployments across namespaces, each family of the operator present (the operator-wide
ones included: the event loop's lag, the shards), and the test fails with promtool's own words
when it reports anything not in ``KEPT`` below.

The gateway pods' /metrics (spec.podMonitor) is not checked here: it is the gateway's own
endpoint, and the operator's pod code (operator/gateway_operator/pod) adds no metrics to it.
"""
from __future__ import annotations

import subprocess
import urllib.request
from typing import Iterator

import pytest

from gateway_operator.core import conditions as C
from gateway_operator.core import health
from gateway_operator.loop import metrics
from harness.cluster import tool

# promtool's findings kept on purpose, each with the reason it is kept (renaming the metric would
# cost more than the finding's worth). Empty: promtool has nothing to say about today's metrics.
# An entry is promtool's line as it prints it, e.g.
#   'gateway_operator_example counter metrics should have "_total" suffix'
KEPT: frozenset[str] = frozenset()

# every family the endpoint serves once the operator runs (what the records below must bring out)
OPERATOR_WIDE = ("gateway_operator_loops_waiting", "gateway_operator_event_loop_lag_seconds",
                 "gateway_operator_shard_held", "gateway_operator_shard_members")


@pytest.fixture
def records() -> Iterator[None]:
    """The module's records emptied for the test and put back after it."""
    saved = (dict(metrics._series), dict(metrics._shards), list(metrics._shard_members), list(metrics._lag),
             list(metrics._lag_sum), list(metrics._waiting))
    metrics._series.clear()
    metrics._shards.clear()
    try:
        yield
    finally:
        metrics._series.clear()
        metrics._shards.clear()
        series, shards, metrics._shard_members[:], metrics._lag[:], metrics._lag_sum[:], metrics._waiting[:] = saved
        metrics._series.update(series)
        metrics._shards.update(shards)


def _operate() -> None:
    """What a sharded operator replica holding three GatewayDeployments in two namespaces records,
    through the calls the loop makes (a fourth found settled, waiting its turn)."""
    for namespace, name in (("team-a", "support-bot"), ("team-a", "sales-bot"), ("team-b", "support-bot")):
        metrics.observe_conditions(namespace, name, [{"type": t, "status": s} for t, s in
                                                     zip(C.ORDER, ["True", "False", "Unknown"] * 4)])
        metrics.polled(namespace, name, [state.value for state in health.Idempotency])
        metrics.pass_ended(namespace, name, applied=True, writes=3, seconds=0.12, failed=False)
        metrics.pass_ended(namespace, name, applied=True, writes=1, seconds=4.0, failed=True)
        metrics.pass_ended(namespace, name, applied=False, writes=0, seconds=0.0, failed=True)
        metrics.wrote(namespace, name)
        metrics.traffic_gated(namespace, name, taken_out=1, out_now=1)
        metrics.restarted_stale_replica(namespace, name)
    metrics.observe_conditions("team-b", "new-bot", [])   # known, not reconciled yet: no histogram
    for lag in (0.003, 0.04, 0.3, 12.0):
        metrics.loop_lagged(lag)
    metrics.shards_held(4, [0, 3], members=2)
    metrics.waiting_from(lambda: 1)


def _scrape() -> str:
    server = metrics.serve(0, "127.0.0.1")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_address[1]}/metrics", timeout=10) as r:
            return r.read().decode()
    finally:
        server.shutdown()
        server.server_close()


def _findings(exposition: str) -> set[str]:
    """promtool's lint findings on ``exposition`` (it prints them on stderr, one a line, and exits
    3 when there are any; a text it cannot parse is a failure of its own)."""
    checked = subprocess.run([tool("promtool"), "check", "metrics"], input=exposition, capture_output=True,
                             text=True, timeout=60)
    output = (checked.stdout + checked.stderr).strip()
    assert checked.returncode in (0, 3), f"promtool check metrics failed (exit {checked.returncode}):\n{output}"
    assert (checked.returncode == 0) == (not output), output
    return set(output.splitlines())


def test_promtool_finds_nothing_but_the_kept_findings_in_the_served_metrics(records) -> None:
    _operate()
    exposition = _scrape()
    served = {line.split()[2] for line in exposition.splitlines() if line.startswith("# TYPE ")}
    missing = ({name for name, _, _ in metrics.FAMILIES} | set(OPERATOR_WIDE)) - served
    assert not missing, f"the records bring out every family: {sorted(missing)} not served"
    assert "team-b" in exposition and "sales-bot" in exposition
    findings = _findings(exposition)
    assert findings == KEPT, ("promtool check metrics on the operator's /metrics:\n" + "\n".join(sorted(findings - KEPT))
                              + "".join(f"\n(kept, no longer reported: {f})" for f in sorted(KEPT - findings)))


def test_promtool_finds_nothing_in_the_metrics_of_an_operator_holding_nothing(records) -> None:
    """A replica just started (or holding no GatewayDeployment): the families' headers, no series.
    promtool lints only the families that have samples (the test above is the one that checks the
    names); this one checks that headers without series are a text it reads and finds clean."""
    assert _findings(_scrape()) <= KEPT
