"""How many replicas run and how many may stop at once: the HorizontalPodAutoscaler of
spec.autoscaling, the PodMonitor its metric is scraped by, the PodDisruptionBudget, and what
status.autoscaling says was asked for."""
from __future__ import annotations

from gateway_operator import api
from gateway_operator.api import GatewaySpec
from gateway_operator.core.render.deployment import grace_seconds
from gateway_operator.core.render.manifest import Manifest, owned_object
from gateway_operator.core.render.names import Owner, auth_token_ref

HPA_API = ("autoscaling/v2", "HorizontalPodAutoscaler")
POD_MONITOR_API = ("monitoring.coreos.com/v1", "PodMonitor")
# the HPA's scale-down stabilisation: at least its own default, 5 minutes, so that a lull between
# two bursts of model turns does not stop a replica the next burst needs again
MIN_SCALE_DOWN_WINDOW_SECONDS = 300


def disruption_budget(owner: Owner, spec: GatewaySpec) -> Manifest | None:
    if spec.replicas <= 1:
        return None
    return owned_object("policy/v1", "PodDisruptionBudget", owner.name, owner, spec={
        "maxUnavailable": 1, "selector": {"matchLabels": api.selector_for(owner.name)}})


def autoscaling_bounds(spec: GatewaySpec) -> tuple[int, int]:
    """(minReplicas, maxReplicas) of the autoscaler: one at most without the Redis store under
    Refuse (the CRD refuses that spec; this holds even if its rule were missing, as replicas do)."""
    low, high = spec.autoscaling.min_replicas, spec.autoscaling.max_replicas
    if spec.policy == api.Policy.REFUSE and spec.store_backend != "redis":
        return 1, 1
    return min(low, high), high


def canonical_quantity(value: str) -> str:
    """A positive decimal as the API server writes the quantity back ('1.5' -> '1500m', '3.0' -> '3'),
    so that the applied HPA is found unchanged at the next pass instead of written again."""
    whole, _, fraction = value.partition(".")
    milli = int(whole or "0") * 1000 + int((fraction + "000")[:3])
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def autoscaler(owner: Owner, spec: GatewaySpec) -> Manifest | None:
    """spec.autoscaling: an autoscaling/v2 HPA whose target is this GatewayDeployment's own /scale
    (so the CRD's replica rules and the operator's guard apply to every replica count it writes), on
    a per-pod metric of the custom metrics API (api.AUTOSCALING_METRICS). Scale-in removes one
    replica per grace period, so a stopping replica has drained its turns (and released the
    claims of those it could not finish) before the next one stops."""
    if not spec.autoscaling.enabled:
        return None
    low, high = autoscaling_bounds(spec)
    metric_name, _ = api.AUTOSCALING_METRICS[spec.autoscaling.target.metric]
    grace = grace_seconds(spec)
    return owned_object(HPA_API[0], HPA_API[1], owner.name, owner, spec={
        "scaleTargetRef": {"apiVersion": api.API_VERSION, "kind": api.KIND, "name": owner.name},
        "minReplicas": low,
        "maxReplicas": high,
        "metrics": [{"type": "Pods", "pods": {
            "metric": {"name": metric_name},
            "target": {"type": "AverageValue",
                       "averageValue": canonical_quantity(spec.autoscaling.target.average_value)}}}],
        "behavior": {"scaleDown": {
            "stabilizationWindowSeconds": min(max(MIN_SCALE_DOWN_WINDOW_SECONDS, grace), 3600),
            # one replica per grace period (validation: it fits the HPA's 1800 s at most)
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": min(grace, api.HPA_MAX_PERIOD_SECONDS)}]}},
    })


def pod_monitor(owner: Owner, spec: GatewaySpec) -> Manifest | None:
    """spec.podMonitor: the Prometheus operator's scrape of every gateway pod's token-protected
    GET /metrics. The bearer token is named by reference (the auth Secret's name and key), which
    Prometheus reads itself: the token is never in this or any other rendered object."""
    if not spec.pod_monitor_enabled:
        return None
    token = auth_token_ref(owner.name, spec)
    manifest = owned_object(POD_MONITOR_API[0], POD_MONITOR_API[1], owner.name, owner, spec={
        "selector": {"matchLabels": api.selector_for(owner.name)},
        "podMetricsEndpoints": [{
            "port": "http", "path": "/metrics", "scheme": "http", "interval": spec.pod_monitor.interval,
            "authorization": {"type": "Bearer", "credentials": {"name": token.name, "key": token.key}},
        }],
    })
    manifest["metadata"]["labels"] = {**dict(spec.pod_monitor.labels), **manifest["metadata"]["labels"]}
    return manifest


def autoscaling_status(name: str, spec: GatewaySpec) -> dict[str, str]:
    """status.autoscaling: the autoscaler and the PodMonitor the spec asks for (by name), so that
    a later pass looks for them to remove only once they were asked for."""
    found = {}
    if spec.autoscaling.enabled:
        found["horizontalPodAutoscaler"] = name
    if spec.pod_monitor_enabled:
        found["podMonitor"] = name
    return found
