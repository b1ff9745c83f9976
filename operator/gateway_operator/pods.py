"""The one pod-ready check: the operator's pod index, its managed-Redis lookup, the benchmark and
the test harness all read a pod's readiness here."""
from __future__ import annotations

from typing import Any, Mapping


def ready(status: Mapping[str, Any]) -> bool:
    """The pod's Ready condition is True (the kubelet's readiness probe passes)."""
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def serving(pod: Mapping[str, Any]) -> bool:
    """Ready, with an IP, and not being deleted: a pod that takes traffic (and is polled)."""
    status = pod.get("status") or {}
    return ready(status) and bool(status.get("podIP")) and not (pod.get("metadata") or {}).get("deletionTimestamp")
