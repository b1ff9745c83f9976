"""Which change of condition posts an Event, and of which type: declared once, pure.

``EVENTS`` holds, per condition type, its rules in order; publish.py posts what ``event_for``
says for each transition it writes.
"""
from __future__ import annotations

from typing import Callable, Mapping

from gateway_operator.api import reasons as R
from gateway_operator.core import conditions as C
from gateway_operator.core.conditions import Transition

_Rule = Callable[[Transition], "tuple[str, str, str] | None"]


def _when(status: str | None, event: str, reason: str | None = None, message: str | None = None,
          was: Callable[[str | None], bool] = lambda old: True) -> _Rule:
    def rule(t: Transition) -> tuple[str, str, str] | None:
        c = t.new
        if status is not None and c["status"] != status or not was(t.old):
            return None
        return event, reason or c["reason"], message or c["message"]
    return rule


#: ExactlyOnceAdmission reasons that post a Warning: a shape that never holds, and the announcements
#: of a risk on named pods (claim_risk.py), which must be seen before the second run can happen
_NOT_HELD = (R.PER_REPLICA_STORES, R.CLAIMS_AT_RISK, R.REPLICA_CANNOT_REACH_REDIS)

#: per condition type, its rules in order; the first that matches posts the Event
EVENTS: Mapping[str, tuple[_Rule, ...]] = {
    C.STALLED: (_when("True", "Warning"),),
    C.REDIS_DURABLE: (_when("False", "Warning", was=lambda old: old != "False"),),
    C.IDEMPOTENCY_DEGRADED: (
        _when("True", "Warning", "IdempotencyDegraded"),
        _when(None, "Normal", "IdempotencyRecovered", "no replica reports durability:idempotency any more",
              was=lambda old: old == "True")),
    C.REDIS_REACHABLE: (
        _when("False", "Warning", "RedisUnreachable"),
        _when("True", "Normal", "RedisReachable", was=lambda old: old == "False")),
    C.REDIS_TLS_VERIFIED: (_when("False", "Warning"),),
    C.GATEWAY_COMPATIBLE: (_when("False", "Warning"),),
    C.REPLICA_SAFE_CHANNELS: (_when("False", "Warning"),),
    C.EXACTLY_ONCE: (
        lambda t: (("Warning", "ExactlyOnceNotHeld", t.new["message"])
                   if t.new["status"] == "False" and t.new["reason"] in _NOT_HELD else None),
        _when("True", "Normal", "ExactlyOnceAdmission", was=lambda old: old is not None)),
}


def event_for(t: Transition) -> tuple[str, str, str] | None:
    return next((e for e in (rule(t) for rule in EVENTS.get(t.type, ())) if e), None)
