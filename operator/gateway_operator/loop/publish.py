"""The loop's one write: status, when it changed, and an Event for each transition that
events.EVENTS names (with one log line per transition).

``status.build`` makes the new status from the facts (pure); this module writes its merge
patch and posts the Events. A status the API server refuses raises (the loop backs off).
``publish`` also names what status carries beside the facts (the network policy, the autoscaling
asked for) and gives the first status of a generation the prompt threads: the controller
(controller.py) hands it a pass's outcome and drives no more of the write.
"""
from __future__ import annotations

import datetime as dt
import logging
from typing import Any, Mapping, MutableMapping, Sequence, cast

import kopf

from gateway_operator import api
from gateway_operator.api import GatewaySpec, reasons
from gateway_operator.api.objects import meta_of, status_of, with_generation
from gateway_operator.clients.kube import Kube
from gateway_operator.core import conditions, events, status
from gateway_operator.core.conditions import Facts, Problem
from gateway_operator.core.expose import Exposure
from gateway_operator.core.outcome import Outcome
from gateway_operator.core.render.autoscaling import autoscaling_status
from gateway_operator.core.render.names import gateway_network_policy_name
from gateway_operator.loop import metrics, threads


class ObjectLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """The operator's log lines about one GatewayDeployment carry its namespace/name; a problem
    is logged once per change, not per try."""

    last_problem: Problem | None = None

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        return f"[{self.extra['object']}] {msg}", kwargs  # type: ignore[index]

    def problem(self, problem: Problem | None, exc_info: Any = None, line: str = "") -> None:
        if problem == self.last_problem:
            return
        if problem is not None and problem.reason in reasons.RETRIED:  # the API server's state: no traceback
            self.warning("%s", line or f"retrying: {problem.reason}: {problem.message}")
        elif problem is not None:
            self.warning("%s", line or f"stalled: {problem.reason}: {problem.message}", exc_info=exc_info)
        elif self.last_problem is not None:
            self.info("no longer %s (was %s)", "retrying" if self.last_problem.reason in reasons.RETRIED else "stalled",
                      self.last_problem.reason)
        self.last_problem = problem


def now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


async def publish(kube: Kube, body: Mapping[str, Any], spec: GatewaySpec | None, facts: Facts, outcome: Outcome,
                  exposure: Exposure | None, log: ObjectLog) -> Mapping[str, Any] | None:
    """Status from a pass's outcome and the latest poll; returns the object as written (None:
    nothing to write). ``body``: at the generation that pass reconciled (``at_generation``), of its
    ``spec``; ``outcome``: the pass's (reconcile.Outcome), its problem as the schedule shows it."""
    meta, previous = meta_of(body), status_of(body)
    policy = gateway_network_policy_name(meta.name) if spec and spec.network_policy.enabled else ""
    # the autoscaler and PodMonitor asked for (render.autoscaling.autoscaling_status); a spec that does
    # not parse keeps what status said, so that they are still removed once a spec without them comes
    autoscaling = (autoscaling_status(meta.name, spec) if spec is not None
                   else previous.autoscaling or None)
    # the first status of a generation is what a user waits on (observedGeneration)
    token = threads.PROMPT.set(meta.generation != previous.observed_generation)
    try:
        return await _write(kube, body, facts, outcome, exposure, policy, log, autoscaling)
    finally:
        threads.PROMPT.reset(token)


def at_generation(body: Mapping[str, Any], generation: object) -> Mapping[str, Any]:
    """``body`` as the watch and our last write left it, as of the generation a pass reconciled (a
    newer spec is not reconciled yet)."""
    return body if meta_of(body).generation == generation else with_generation(body, generation)


async def _write(kube: Kube, body: Mapping[str, Any], facts: Facts, outcome: Outcome, exposure: Exposure | None,
                 policy: str, log: ObjectLog, autoscaling: Mapping[str, str] | None) -> Mapping[str, Any] | None:
    """Writes status when it changed."""
    (namespace, name), said = meta_of(body).key, status_of(body)
    previous = said.raw
    selector = ",".join(f"{k}={v}" for k, v in api.selector_for(name).items())
    # a pass that stopped before it could tell (a problem) keeps what status said
    migration = (outcome.migration.status() if outcome.migration is not None
                 else (said.sqlite_migration or None) if outcome.problem is not None else None)
    new = status.build(previous, facts, outcome.target, now_iso(), selector, exposure, policy, migration, autoscaling)
    metrics.observe_conditions(namespace, name, new["conditions"])
    if not status.changed(previous, new):
        return None
    written = await threads.run(kube.patch_status, namespace, name, status.merge_patch(previous, new))
    metrics.wrote(namespace, name)
    _post_events(body, list(said.conditions), new["conditions"], log)
    return written


def _post_events(body: Mapping[str, Any], before: Sequence[Mapping[str, Any]],
                 after: Sequence[Mapping[str, Any]], log: ObjectLog) -> None:
    for t in conditions.transitions(before, after):
        log.info("%s %s -> %s (%s): %s", t.type, t.old or "-", t.new["status"], t.new["reason"], t.new["message"])
        event = events.event_for(t)
        if event:
            post_event(body, event[0], event[1], event[2])


def post_event(body: Mapping[str, Any], type: str, reason: str, message: str) -> None:
    """An Event on the object ``body`` (kopf posts it in the background)."""
    # cast: kopf.event is annotated for kopf's own Body, but of the object it reads only the fields of
    # the Event's reference, with .get (kopf's bodies.build_object_reference): a plain copy does
    kopf.event(cast(kopf.Body, dict(body)), type=type, reason=reason, message=message)
