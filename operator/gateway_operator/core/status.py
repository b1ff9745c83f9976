"""The ``status`` a GatewayDeployment should carry, from facts (pure)."""
from __future__ import annotations

from typing import Any, Mapping

from gateway_operator.api.redis_target import RedisTarget
from gateway_operator.core import compat, conditions
from gateway_operator.core.conditions import Facts
from gateway_operator.core.expose import Exposure

# keys that go when the spec stops asking for them (or, gateway, when no replica tells its versions)
REMOVABLE = ("redis", "expose", "networkPolicy", "sqliteMigration", "gateway", "autoscaling")


def build(previous: Mapping[str, Any] | None, facts: Facts, target: RedisTarget | None, now: str,
          selector: str = "", exposure: Exposure | None = None, network_policy: str = "",
          migration: Mapping[str, Any] | None = None, autoscaling: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``selector``: the gateway pods' label selector (the scale subresource reads it);
    ``exposure``: where clients outside reach the replicas (spec.expose), when set;
    ``network_policy``: the gateway NetworkPolicy's name (spec.networkPolicy), when enabled;
    ``autoscaling``: the HPA and PodMonitor the spec asks for (render.autoscaling.autoscaling_status)."""
    previous = previous or {}
    merged = conditions.merge(previous.get("conditions") or [], conditions.compute(facts), facts.generation, now)
    exactly_once = next(c["status"] for c in merged if c["type"] == conditions.EXACTLY_ONCE)
    status: dict[str, Any] = {
        "observedGeneration": facts.generation,
        "replicas": facts.running_replicas,
        "readyReplicas": facts.ready_replicas,
        "readyOfDesired": f"{facts.ready_replicas}/{facts.desired_replicas}",
        "degradedReplicas": len(facts.degraded),
        "storeBackend": facts.store_backend,
        "exactlyOnce": exactly_once,
        "conditions": merged,
    }
    if selector:
        status["selector"] = selector
    versions = compat.running(facts.health)
    if versions:  # what the polled replicas run, as their launchers tell it (several while a rollout runs)
        status["gateway"] = {"versions": [{"praisonaiBot": bot, "praisonaiagents": agents, "replicas": n}
                                          for bot, agents, n in versions]}
    if target is not None:
        status["redis"] = {"endpoint": target.endpoint, "prefix": target.prefix, **facts.dedup.status(),
                           **(facts.unrecorded.status() if facts.unrecorded_open else {})}
    if exposure is not None:
        status["expose"] = exposure.status()
    if network_policy:
        status["networkPolicy"] = {"name": network_policy}
    if migration:
        status["sqliteMigration"] = dict(migration)
    if autoscaling:
        status["autoscaling"] = dict(autoscaling)
    return status


def changed(previous: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """Write only when something a reader can see differs (kopf's own keys are ignored)."""
    previous = previous or {}
    return any(previous.get(k) != v for k, v in new.items()) or any(k in previous and k not in new for k in REMOVABLE)


def merge_patch(previous: Mapping[str, Any] | None, new: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch that turns ``previous`` into ``new``: a merge patch removes a key
    only by null, inside the objects it merges too (status.expose's message goes once the
    address comes)."""
    previous = previous or {}
    patch = dict(new)
    for key in REMOVABLE:
        old, now = previous.get(key), new.get(key)
        if isinstance(old, Mapping) and now is None:
            patch[key] = None
        elif isinstance(old, Mapping) and isinstance(now, Mapping):
            patch[key] = {**{k: None for k in old if k not in now}, **now}
    return patch
