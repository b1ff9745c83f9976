"""What the operator knows of a gateway pod (``PodView``), and the one pod-ready check: the
operator's pod index, its managed-Redis lookup, the benchmark and the test harness all read a
pod's readiness here."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class PodView:
    """What the operator needs to know of one gateway pod (kept in a kopf index)."""

    name: str
    uid: str
    ip: str | None
    ready: bool
    deleting: bool
    waiting_reason: str | None = None
    waiting_message: str = ""   # the kubelet's, for the POD_WAITING reasons only (bounded)
    last_exit_code: int | None = None

    @property
    def serving(self) -> bool:
        """As ``serving`` below: ready and not being deleted (and so polled)."""
        return self.ready and not self.deleting


def ready(status: Mapping[str, Any]) -> bool:
    """The pod's Ready condition is True (the kubelet's readiness probe passes)."""
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def serving(pod: Mapping[str, Any]) -> bool:
    """Ready, with an IP, and not being deleted: a pod that takes traffic (and is polled)."""
    status = pod.get("status") or {}
    return ready(status) and bool(status.get("podIP")) and not (pod.get("metadata") or {}).get("deletionTimestamp")
