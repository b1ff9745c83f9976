"""The always-on slice of the fuzz suite (issue 7): a fixed-seed handful of adversarial
GatewayDeployments through the real API server and the session's operator, with a
bystander in its own namespace. The full run is ``make fuzz`` (hack/fuzz.py).

Each case is either refused at admission with the API server's message, or accepted and
then Ready, Stalled with a reason and message, or waiting for Redis with a reason, within a
bound; meanwhile the operator keeps its pid, logs no traceback, stays under an RSS bound,
and keeps the bystander's latency low.
"""
from __future__ import annotations

from typing import Any

from harness import fuzz
from harness.cluster import Cluster
from harness.operator import OperatorProcess
from harness.redis_server import RedisServer

SEED = 20260407
RANDOM = 30
# mutations that broke the operator before it was hardened, always in the slice
SENTINELS = ["deep:dict-3000", "deep:list-990", "deep:dict-400", "redis.url:long-label-100", "redis.url:dotdot",
             "redis.host:253chars", "config.gateway:list", "password:not-utf8", "size:config-string-1400k",
             "metadata:finalizer", "metadata:ownerRef-bogus"]
CASES = RANDOM + len(SENTINELS)
BOUNDS = fuzz.Bounds(peak_rss_mib=250.0, bystander_max_seconds=15.0)


def test_generator_is_seeded_and_pure() -> None:
    first = fuzz.cases(SEED, 60)
    again = fuzz.cases(SEED, 60)
    assert [c.id for c in first] == [c.id for c in again]
    assert [fuzz.to_json(c.manifest) for c in first] == [fuzz.to_json(c.manifest) for c in again]
    assert [fuzz.to_json(c.manifest) for c in fuzz.cases(SEED, 20)] == [fuzz.to_json(c.manifest) for c in first[:20]]
    assert fuzz.to_json(fuzz.cases(SEED + 1, 5)[0].manifest) != fuzz.to_json(first[0].manifest)
    # enough cases walk the whole catalogue
    labels = {m for c in fuzz.cases(SEED, len(fuzz.CATALOGUE)) for m in fuzz.mutations_of(c.kind)}
    assert labels == {label for label, _ in fuzz.CATALOGUE}
    sentinels = fuzz.cases_for(SEED, SENTINELS, start=RANDOM)
    assert [fuzz.mutations_of(c.kind) for c in sentinels] == [[label] for label in SENTINELS]
    names = [c.manifest["metadata"]["name"] for c in fuzz.cases(SEED, RANDOM) + sentinels]
    assert len(set(names)) == len(names)


def test_fuzz_slice(cluster: Cluster, operator: OperatorProcess, redis_server: RedisServer) -> None:
    def restart(old: OperatorProcess) -> OperatorProcess:
        old.stop()  # a dead operator is a failure below; the rest of the session gets a live one
        return old.start()

    watch = fuzz.OperatorWatch(operator, restart)
    cases = (fuzz.cases(SEED, RANDOM, redis_url=redis_server.url)
             + fuzz.cases_for(SEED, SENTINELS, start=RANDOM, redis_url=redis_server.url))
    summary: dict[str, Any] = fuzz.run_cases(cluster, watch, redis_server.password or "", cases, seed=SEED,
                                             batch_size=21, settle_timeout=30)
    report = fuzz.table(summary)
    print(report)

    assert summary["cases"] == CASES and summary["accepted"] > 0 and summary["refused"] > 0, report
    assert not summary["unsettled"], report
    assert not summary["refused_without_message"], report
    assert not summary["harness_errors"], report
    assert summary["operator_restarts"] == 0 and summary["operator_alive"], report
    assert summary["operator_pid"] == summary["operator_first_pid"], report
    assert summary["tracebacks"] == 0, report
    assert summary["peak_rss_mib"] < BOUNDS.peak_rss_mib, report
    assert summary["bystander"]["samples"] > 0, report
    assert summary["bystander"]["max"] < BOUNDS.bystander_max_seconds, report
    assert fuzz.failures(summary, BOUNDS) == [], report
