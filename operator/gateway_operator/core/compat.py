"""Does the gateway the replicas run keep the operator's guarantees? (pure; issue 32)

The launcher checks, at every start, each private name of the gateway it relies on
(pod/gwop_upstream.REQUIREMENTS) and refuses to start without one (exit 78, one line naming what
is missing and the versions found: ``PodView.refused_gateway``). A replica that runs has them all;
that proves the names, not the behaviour behind them, which only the real-gateway suite proves,
release by release (``TESTED_RELEASES``, the CI's release matrix). So:

- a pod that refused to start: ``GatewayCompatible=False GatewayIncompatible``;
- a replica on a praisonai-bot release outside ``TESTED_RELEASES``:
  ``GatewayCompatible=False UntestedGatewayRelease``;
- every replica that told its versions on a tested release: ``True TestedGatewayRelease``;
- nobody told yet (no replica polled, or an image whose launcher does not say): ``Unknown``.

Under ``spec.replicaPolicy: Refuse`` scale-out past the replicas that run is held while the condition is
False, as it is while Redis is unproven; under ``Warn`` it is only reported.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from gateway_operator.api import reasons as R
from gateway_operator.core.health import ReplicaHealth

#: the praisonai-bot releases the real-gateway suite (tests/unit/test_launcher_real_gateway.py)
#: passes against, each run in CI (hack/release-matrix.sh); the last is requirements-dev.txt's
TESTED_RELEASES: tuple[str, ...] = ("0.1.12", "0.1.13", "0.1.14", "0.1.15", "0.1.16")


@dataclass(frozen=True)
class Compatibility:
    status: str          # "True", "False", "Unknown"
    reason: str
    message: str

    @property
    def compatible(self) -> bool:
        """Not known to be incompatible (Unknown is not a reason to hold anything)."""
        return self.status != "False"


def running(health: Iterable[ReplicaHealth]) -> list[tuple[str, str, int]]:
    """(praisonai-bot, praisonaiagents, replicas) for each pair of versions the polled replicas
    told, in order: what status.gateway.versions shows and the condition reads."""
    found = Counter(h.versions for h in health if len(h.versions) == 2)
    return [(bot, agents, n) for (bot, agents), n in sorted(found.items())]


def refusals(pods: Iterable[Any]) -> list[tuple[str, str]]:
    """(pod, the launcher's line) for each pod (a pods.PodView) that refused the gateway (exit 78)."""
    return [(pod.name, pod.refused_gateway) for pod in pods if pod.refused_gateway]


def releases(gateway_status: Mapping[str, Any] | None) -> list[tuple[str, str, int]]:
    """status.gateway.versions as (praisonai-bot, praisonaiagents, replicas); anything malformed
    is left out (status is written by the operator, but read back from the API)."""
    out = []
    for row in (gateway_status or {}).get("versions") or []:
        if isinstance(row, Mapping) and isinstance(row.get("praisonaiBot"), str):
            out.append((row["praisonaiBot"], str(row.get("praisonaiagents") or ""), int(row.get("replicas") or 0)))
    return out


def assess(versions: Iterable[tuple[str, str, int]], refused: Sequence[tuple[str, str]]) -> Compatibility:
    """``versions``: what the polled replicas run (``releases``); ``refused``: (pod, the launcher's
    line) for pods that refused to start."""
    if refused:
        pod, line = refused[0]
        return Compatibility("False", R.GATEWAY_INCOMPATIBLE,
                             f"pod {pod} refused to start (exit 78): {line}; the operator supports praisonai-bot "
                             f"{tested()}")
    found = list(versions)
    if not found:
        return Compatibility("Unknown", R.GATEWAY_VERSIONS_UNKNOWN, "no replica has told its gateway versions yet")
    untested = sorted({bot for bot, _, _ in found if bot not in TESTED_RELEASES})
    running = ", ".join(f"praisonai-bot {bot} with praisonaiagents {agents} on {n}" for bot, agents, n in found)
    if untested:
        return Compatibility("False", R.UNTESTED_GATEWAY_RELEASE,
                             f"replicas run {running}: praisonai-bot {', '.join(untested)} is not among the releases "
                             f"the operator is tested with ({tested()}); every name its launcher relies on was "
                             "found, but not proven to behave; under spec.replicaPolicy Refuse scale-out is held")
    return Compatibility("True", R.TESTED_GATEWAY_RELEASE, f"replicas run {running}")


def tested() -> str:
    return ", ".join(TESTED_RELEASES)
