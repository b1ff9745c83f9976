"""The reconcile pass (steps.STEPS) and its summary (problems.py, events.py, facts.py) without a cluster.

The API server is an IN-MEMORY STAND-IN here (``ApiStandIn``: objects in a dict, every call
counted), and so is the Redis probe (``ProbeStandIn``): these tests drive the pass's decisions
(which problem wins, what is applied despite one, what an observation pass reads) and the
Events table. The same pass against the real API server and real Redis is tests/sim.
"""
from __future__ import annotations

import ast
import dataclasses
import asyncio
import base64
import copy
import io
import time
from pathlib import Path
from typing import Any, Mapping

import pytest
from kubernetes.client.rest import ApiException

from gateway_operator import api
from gateway_operator.api import GatewaySpec
from gateway_operator.api import reasons as R
from gateway_operator.clients.kube import ApplyResult, NotOwned, NotServed, controlled_by
from gateway_operator.core import conditions as C
from gateway_operator.core import events, problems
from gateway_operator.core import facts as status_facts
from gateway_operator.core.conditions import Problem, Transition
from gateway_operator.api.workloads import controller_uid
from gateway_operator.core.pods import PodView
from gateway_operator.core.probe_result import ProbeResult
from gateway_operator.core.rollouts import RolloutGate, RolloutState
from gateway_operator.core.schedule import PassKind
from gateway_operator.core.settings import ReconcileSettings
from gateway_operator.loop.reconcile import Observation, reconcile
from gateway_operator.loop.reconcile import Result as ReconcileResult

UID = "uid-1"
PACKAGE = Path(__file__).resolve().parents[2] / "operator/gateway_operator"


WATCHED_KINDS = ("Deployment", "ConfigMap", "Service", "PodDisruptionBudget")  # the owned kinds handlers.py watches


class ApiStandIn:
    """IN-MEMORY API SERVER STAND-IN with the Kube methods the pass calls."""

    def __init__(self, objects: list[dict[str, Any]] = ()) -> None:  # type: ignore[assignment]
        self.objects = {self._key(o["apiVersion"], o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]): o
                        for o in objects}
        self.calls: list[str] = []
        self.refuse_apply: ApiException | None = None
        # a watch of the owned kinds handlers.py watches, when ``watching``: each object's version, as
        # changed by an apply or ``drift``, and the version each was last applied at
        self.watching = False
        self.versions: dict[tuple[str, str, str], int] = {}
        self.verified: dict[tuple[str, str, str], int] = {}
        self.secrets_watched = False   # a Secret watch (--watch-secrets): each Secret as stored

    def delivered(self, kind: str, namespace: str, name: str) -> int | None:
        found = self.objects.get(("v1", kind, namespace, name)) if kind == "Secret" and self.secrets_watched else None
        return int(found["metadata"]["resourceVersion"]) if found else None

    def controller(self, kind: str, namespace: str, name: str) -> str | None:
        found = self.objects.get(("v1", kind, namespace, name))
        return controller_uid(found) if found else None

    @staticmethod
    def _key(api_version: str, kind: str, namespace: str, name: str) -> tuple[str, str, str, str]:
        return api_version, kind, namespace, name

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        self.calls.append(f"get {kind}/{name}")
        found = self.objects.get(self._key(api_version, kind, namespace, name))
        return copy.deepcopy(found) if found else None

    def apply(self, manifest: Mapping[str, Any], owner_uid: str) -> ApplyResult:
        meta = manifest["metadata"]
        self.calls.append(f"apply {manifest['kind']}/{meta['name']}")
        live = self.get(manifest["apiVersion"], manifest["kind"], meta["namespace"], meta["name"])
        if live is not None and not controlled_by(live, owner_uid):
            raise NotOwned(manifest["kind"], meta["namespace"], meta["name"])
        if self.refuse_apply is not None:
            raise self.refuse_apply
        stored = copy.deepcopy(dict(manifest))
        stored["metadata"]["generation"] = int(((live or {}).get("metadata") or {}).get("generation") or 0) + 1
        self.objects[self._key(manifest["apiVersion"], manifest["kind"], meta["namespace"], meta["name"])] = stored
        watched = (manifest["kind"], meta["namespace"], meta["name"])
        self.versions[watched] = self.verified[watched] = self.versions.get(watched, 0) + 1
        return ApplyResult(manifest["kind"], meta["name"], True, copy.deepcopy(stored), stored["metadata"]["generation"])

    def unchanged(self, owner_uid: str, objects: Any, absent: Any = ()) -> bool:
        self.calls.append("unchanged?")
        shown = self.versions if self.watching else {}
        return all(k[0] in WATCHED_KINDS and k in shown and shown[k] == self.verified.get(k) for k in objects) \
            and not any(k in shown for k in absent)

    def drift(self, kind: str, name: str) -> None:
        """Someone else changed an owned object: the watch shows a newer version."""
        self.versions[(kind, "ns", name)] += 1

    def create_if_absent(self, manifest: Mapping[str, Any], owner_uid: str) -> tuple[bool, dict[str, Any] | None]:
        meta = manifest["metadata"]
        key = (manifest["kind"], meta["namespace"], meta["name"])
        if self.secrets_watched and self.delivered(*key) is not None:   # shown there: nothing read
            if self.controller(*key) != owner_uid:
                raise NotOwned(*key)
            return False, None
        live = None if self.secrets_watched else self.get(manifest["apiVersion"], *key)
        if live is not None:
            return False, live
        self.calls.append(f"create {manifest['kind']}/{meta['name']}")
        stored = copy.deepcopy(dict(manifest))
        stored["metadata"]["resourceVersion"] = "1"
        if "stringData" in stored:
            stored["data"] = {k: base64.b64encode(v.encode()).decode() for k, v in stored.pop("stringData").items()}
        self.objects[self._key(manifest["apiVersion"], manifest["kind"], meta["namespace"], meta["name"])] = stored
        return True, copy.deepcopy(stored)

    def delete_if_present(self, api_version: str, kind: str, namespace: str, name: str, owner_uid: str) -> bool:
        if kind == "HTTPRoute":  # a cluster without the Gateway API
            raise NotServed(api_version, kind)
        live = self.get(api_version, kind, namespace, name)
        if live is None or not controlled_by(live, owner_uid):
            return False
        del self.objects[self._key(api_version, kind, namespace, name)]
        return True

    def secret_value(self, namespace: str, name: str, key: str,
                     read: Mapping[str, Any] | None = None) -> tuple[str | None, str]:
        secret = read if read is not None else self.get("v1", "Secret", namespace, name)
        if secret is None:
            raise LookupError(name)
        data = secret.get("data") or {}
        return (base64.b64decode(data[key]).decode() if key in data else None,
                str(secret["metadata"].get("resourceVersion")))

    def pods(self, namespace: str, selector: Mapping[str, str]) -> list[dict[str, Any]]:
        self.calls.append("list pods")
        return []

    def deployment(self, name: str = "bot") -> dict[str, Any] | None:
        return self.objects.get(("apps/v1", "Deployment", "ns", name))


class ProbeStandIn:
    """REDIS PROBE STAND-IN: answers what it is told."""

    def __init__(self, result: ProbeResult) -> None:
        self.result, self.calls = result, 0

    async def probe(self, *_: Any, **__: Any) -> ProbeResult:
        self.calls += 1
        return self.result


CONFIG = {"agents": {"assistant": {"instructions": "Reply.", "model": "gpt-4o-mini"}},
          "channels": {"telegram": {"token": "${TELEGRAM_BOT_TOKEN}"}}}


def gateway(spec: Mapping[str, Any], **status: Any) -> dict[str, Any]:
    config = {**CONFIG, **(spec.get("config") or {})}
    return {"metadata": {"name": "bot", "namespace": "ns", "uid": UID, "generation": 1},
            "spec": {"image": "gateway:1", **spec, "config": config}, "status": status}


def secret(name: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "ns", "resourceVersion": "7"},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}


REDIS_SPEC = {"replicas": 3, "redis": {"url": "redis://redis.example:6379/0",
                                       "passwordSecretRef": {"name": "redis-auth", "key": "password"}},
              "config": {"hooks": {"idempotency": {"store_backend": "redis"}}}}
PROBE_OK = ProbeResult(True, R.PROBE_SUCCEEDED, "ok")


def run(kube: ApiStandIn, body: Mapping[str, Any], kind: PassKind = PassKind.FULL, probe: ProbeResult = PROBE_OK,
        pods: list[PodView] = (), seen: Observation = Observation(),  # type: ignore[assignment]
        rollouts: RolloutGate | None = None):
    prober = ProbeStandIn(probe)
    result = asyncio.run(reconcile(kube, prober, ReconcileSettings(), body, list(pods), kind,  # type: ignore[arg-type]
                                   seen, rollouts))
    return result, prober


def test_a_full_pass_applies_the_gateway_and_keeps_the_secret_inputs() -> None:
    kube = ApiStandIn([secret("redis-auth", password="pw")])
    result, prober = run(kube, gateway(REDIS_SPEC))
    assert result.outcome.problem is None and result.outcome.applied and prober.calls == 1
    assert kube.deployment()["spec"]["replicas"] == 3   # the probe passed: the gate is open
    assert result.inputs is not None and result.inputs.password == "pw"  # kept for the observation passes


def test_dropping_spec_expose_removes_the_route_and_status_expose_on_a_cluster_without_gateway_api() -> None:
    ingress = {"ingress": {"className": "edge", "host": "bot.gateway.test"}}
    kube = ApiStandIn()
    result, _ = run(kube, gateway({"expose": ingress}))
    assert result.outcome.problem is None and ("networking.k8s.io/v1", "Ingress", "ns", "bot") in kube.objects
    result, _ = run(kube, gateway({}, expose={"message": "no address yet"}))   # status says routes were written
    assert result.outcome.problem is None and result.outcome.exposure is None
    assert ("networking.k8s.io/v1", "Ingress", "ns", "bot") not in kube.objects


def test_the_scale_out_gate_holds_while_the_probe_fails() -> None:
    kube = ApiStandIn([secret("redis-auth", password="pw")])
    result, _ = run(kube, gateway(REDIS_SPEC), probe=ProbeResult(False, R.CONNECTION_FAILED, "no"))
    assert result.outcome.problem is None
    assert kube.deployment()["spec"]["replicas"] == 1


def test_an_observation_pass_reads_nothing_from_the_api_server() -> None:
    kube = ApiStandIn([secret("redis-auth", password="pw")])
    first, _ = run(kube, gateway(REDIS_SPEC))
    kube.calls.clear()
    seen = Observation(deployment=_watched(kube), inputs=first.inputs)
    result, prober = run(kube, gateway(REDIS_SPEC), kind=PassKind.OBSERVE, seen=seen)
    assert kube.calls == [] and prober.calls == 1
    assert not result.outcome.applied and result.outcome.observed.running == 3


def test_a_full_pass_reads_each_secret_once_and_the_watched_deployment_not_at_all() -> None:
    """A resync of an idle GatewayDeployment read its auth Secret twice (to create it if absent,
    then for its revision) and its Deployment twice, at about 0.5 ms of client CPU a read: once
    each for a Secret now, and the Deployment as the watch delivered it."""
    kube = ApiStandIn([secret("redis-auth", password="pw")])
    first, _ = run(kube, gateway(REDIS_SPEC))
    kube.calls.clear()
    run(kube, gateway(REDIS_SPEC), seen=Observation(deployment=_watched(kube), inputs=first.inputs))
    reads = [c for c in kube.calls if c.startswith("get ") and "/" in c]
    secrets = [c for c in reads if c.startswith("get Secret/")]
    assert sorted(secrets) == ["get Secret/bot-gateway-auth", "get Secret/bot-session-key",  # generated ...
                               "get Secret/redis-auth"], reads                           # ... and the user's
    assert reads.count("get Deployment/bot") == 1, reads  # the apply's own check (the stand-in has no watch)


def test_a_first_pass_reads_no_secret_it_has_just_created() -> None:
    """A new GatewayDeployment's first pass looked for each Secret it generates, created it, then
    read it again for its revision: the create's own answer is that read (one GET less per
    generated Secret, 2 per GatewayDeployment created, in the benchmark's creation)."""
    kube = ApiStandIn([secret("redis-auth", password="pw")])
    result, _ = run(kube, gateway(REDIS_SPEC))
    assert result.outcome.problem is None and result.inputs is not None
    for name in ("bot-gateway-auth", "bot-session-key"):
        made = kube.calls.index(f"create Secret/{name}")
        assert kube.calls[:made].count(f"get Secret/{name}") == 1, kube.calls      # absent: create it
        assert f"get Secret/{name}" not in kube.calls[made:], kube.calls            # ... and read no more
    # the revision covers the created Secrets all the same (a later rotation still rolls the pods)
    assert result.inputs.revision and result.inputs.revision == run(
        kube, gateway(REDIS_SPEC), seen=Observation(deployment=_watched(kube)))[0].inputs.revision


def test_a_full_pass_whose_inputs_and_objects_are_unchanged_renders_and_applies_nothing() -> None:
    """1,000 idle GatewayDeployments resync every minute, and each full pass rendered every object
    and compared it with the watch's copy: about a tenth of the idle operator's CPU. A full pass
    whose render inputs are those of the last one, and whose objects the watch shows as they were
    then verified, now does neither. A change behind the operator's back, a spec change and a
    rotated Secret each make it render and apply again."""
    kube = ApiStandIn([secret("redis-auth", password="pw")])
    kube.watching = True
    first, _ = run(kube, gateway(REDIS_SPEC))
    assert first.rendered is not None and first.outcome.writes > 0

    def again(body: Mapping[str, Any], last: ReconcileResult) -> ReconcileResult:
        kube.calls.clear()
        result, _ = run(kube, body, seen=Observation(deployment=_watched(kube), inputs=last.inputs,
                                                     rendered=last.rendered))
        assert result.outcome.applied and result.outcome.problem is None, result.outcome
        return result

    def applied() -> list[str]:
        return [c for c in kube.calls if c.startswith("apply ")]

    second = again(gateway(REDIS_SPEC), first)
    assert applied() == [] and second.rendered == first.rendered and second.outcome.writes == 0
    kube.drift("ConfigMap", "bot-gateway-config")
    third = again(gateway(REDIS_SPEC), second)
    assert "apply ConfigMap/bot-gateway-config" in applied() and third.rendered is not None
    third = again(gateway(REDIS_SPEC), third)
    assert applied() == []

    changed = gateway({**REDIS_SPEC, "podAnnotations": {"example.dev/a": "b"}})
    changed["metadata"]["generation"] = 2
    fourth = again(changed, third)
    assert "apply Deployment/bot" in applied()
    kube.objects[("v1", "Secret", "ns", "redis-auth")]["metadata"]["resourceVersion"] = "8"  # rotated
    again(changed, fourth)
    assert "apply Deployment/bot" in applied()
    # without a watch (kube.Kube shows none of them unchanged) every full pass renders and applies
    kube.watching = False
    again(changed, fourth)
    assert "apply Deployment/bot" in applied()


def test_a_re_apply_puts_drift_back_with_the_last_inputs_and_reads_no_secret() -> None:
    """A pod turning Ready or a Deployment's status moving nudged a full pass that read every Secret
    again (6 Secret reads per GatewayDeployment created, three passes of two). A nudge is a re-apply
    now: drift is put back with the Secret inputs the last full pass read; without any, it reads
    them as a full pass would."""
    kube = ApiStandIn([secret("redis-auth", password="pw")])
    kube.watching = True
    first, _ = run(kube, gateway(REDIS_SPEC))
    kube.calls.clear()
    kube.drift("ConfigMap", "bot-gateway-config")
    seen = Observation(deployment=_watched(kube), inputs=first.inputs, rendered=first.rendered, probe=PROBE_OK)
    result, prober = run(kube, gateway(REDIS_SPEC), kind=PassKind.REAPPLY, seen=seen)
    assert result.outcome.applied and result.outcome.problem is None, result.outcome
    assert "apply ConfigMap/bot-gateway-config" in kube.calls
    assert not [c for c in kube.calls if c.startswith(("get Secret/", "create Secret/"))], kube.calls
    assert result.inputs == first.inputs
    kube.calls.clear()
    run(kube, gateway(REDIS_SPEC), kind=PassKind.REAPPLY, seen=seen._replace(inputs=None))   # none kept
    assert sorted(c for c in kube.calls if c.startswith("get Secret/")) == [
        "get Secret/bot-gateway-auth", "get Secret/bot-session-key", "get Secret/redis-auth"], kube.calls


def test_with_the_secret_watch_a_full_pass_reads_a_secret_only_after_it_changed() -> None:
    """Each resync of 1,000 idle GatewayDeployments read every Secret each uses (6,381 Secret reads
    in the benchmark's idle minute, most of the operator's thread CPU). With the Secret watch a full
    pass reads a Secret only when the watch shows it at another version than the last read, and
    creates a generated one it does not show without looking for it first."""
    kube = ApiStandIn([secret("redis-auth", password="pw")])
    kube.secrets_watched = True
    first, _ = run(kube, gateway(REDIS_SPEC))
    assert first.outcome.problem is None and first.inputs is not None
    assert [c for c in kube.calls if "Secret/" in c] == [
        "create Secret/bot-gateway-auth", "create Secret/bot-session-key", "get Secret/redis-auth"], kube.calls

    def again(last: ReconcileResult, spec: Mapping[str, Any] = REDIS_SPEC) -> ReconcileResult:
        kube.calls.clear()
        result, _ = run(kube, gateway(spec), seen=Observation(deployment=_watched(kube), inputs=last.inputs))
        assert result.outcome.problem is None and result.inputs is not None, result.outcome
        return result

    second = again(first)
    assert not [c for c in kube.calls if "Secret/" in c], kube.calls
    assert second.inputs == first.inputs
    kube.objects[("v1", "Secret", "ns", "redis-auth")]["metadata"]["resourceVersion"] = "8"  # rotated
    third = again(second)
    assert sorted(c for c in kube.calls if c.startswith("get Secret/")) == [
        "get Secret/bot-gateway-auth", "get Secret/bot-session-key", "get Secret/redis-auth"], kube.calls
    assert third.inputs is not None and third.inputs.revision != first.inputs.revision   # the pods roll
    # a Secret the spec names now, not read before, is read (the inputs are of other Secrets)
    renamed = {**REDIS_SPEC, "redis": {**REDIS_SPEC["redis"], "passwordSecretRef": {"name": "other"}}}
    kube.objects[("v1", "Secret", "ns", "other")] = secret("other", password="pw2")
    fourth = again(third, renamed)
    assert "get Secret/other" in kube.calls and fourth.inputs.password == "pw2"
    # a generated Secret the watch shows as someone else's is refused without a read
    del kube.objects[("v1", "Secret", "ns", "bot-gateway-auth")]
    kube.objects[("v1", "Secret", "ns", "bot-gateway-auth")] = secret("bot-gateway-auth", token="theirs")
    kube.calls.clear()
    result, _ = run(kube, gateway(renamed), seen=Observation(deployment=_watched(kube), inputs=fourth.inputs))
    assert result.outcome.problem is not None and result.outcome.problem.reason == R.OBJECT_NOT_OWNED, result.outcome
    assert not [c for c in kube.calls if c.startswith("get Secret/bot-gateway-auth")], kube.calls


class BusyProber:
    """REDIS PROBE STAND-IN whose namespace has every probe slot taken: None unless told to wait."""

    def __init__(self) -> None:
        self.waited = 0

    async def probe(self, *_: Any, wait: bool = True, **__: Any) -> ProbeResult | None:
        self.waited += wait
        return ProbeResult(False, R.CONNECTION_FAILED, "waited") if wait else None


def test_an_observation_pass_keeps_the_last_probe_rather_than_queue_for_a_slot() -> None:
    """1,000 gateways in one namespace share its few probe slots: an observation pass that
    queued for one held its step, and so its next /health poll (the benchmark polled 8% of
    what it should). It keeps the last result instead; a full pass, or a first one, waits."""
    kube = ApiStandIn([secret("redis-auth", password="pw")])
    first, _ = run(kube, gateway(REDIS_SPEC))
    seen = Observation(deployment=_watched(kube), inputs=first.inputs, probe=PROBE_OK)
    prober = BusyProber()
    result = asyncio.run(reconcile(kube, prober, ReconcileSettings(), gateway(REDIS_SPEC), [], PassKind.OBSERVE,  # type: ignore[arg-type]
                                   seen, None))
    assert prober.waited == 0 and result.outcome.problem is None
    assert result.outcome.probe == dataclasses.replace(PROBE_OK, reused=True)
    for kind, last in ((PassKind.FULL, PROBE_OK), (PassKind.OBSERVE, None)):
        result = asyncio.run(reconcile(kube, prober, ReconcileSettings(), gateway(REDIS_SPEC), [], kind,  # type: ignore[arg-type]
                                       seen._replace(probe=last), None))
        assert result.outcome.probe is not None and result.outcome.probe.message == "waited"
    assert prober.waited == 2


def test_a_kept_probe_result_is_not_taken_for_a_redis_that_forgot() -> None:
    """The first probe writes the canary (canary_created). Kept by the next observation pass, it
    must not read as the canary vanishing: the benchmark's first cut of the reuse flipped
    ExactlyOnceAdmission to DedupHistoryLost on a third of its gateways."""
    from gateway_operator.core.dedup_history import StoreFacts
    created = ProbeResult(True, R.PROBE_SUCCEEDED, "ok", StoreFacts("c-1", True, "run-1", True, "noeviction"))
    kube = ApiStandIn([secret("redis-auth", password="pw")])
    first, _ = run(kube, gateway(REDIS_SPEC), probe=created)
    remembered = {"endpoint": first.outcome.target.endpoint, "prefix": first.outcome.target.prefix,
                  "canary": "c-1", "runId": "run-1"}
    body = gateway(REDIS_SPEC, redis=remembered)
    seen = Observation(deployment=_watched(kube), inputs=first.inputs, probe=created)
    result = asyncio.run(reconcile(kube, BusyProber(), ReconcileSettings(), body, [], PassKind.OBSERVE, seen, None))  # type: ignore[arg-type]
    assert result.outcome.probe is not None and result.outcome.probe.reused
    facts = status_facts.gather(body, GatewaySpec.parse(body["spec"]), result.outcome, [], time.time())
    assert facts.dedup.lost_at is None
    fresh = asyncio.run(reconcile(kube, ProbeStandIn(created), ReconcileSettings(), body, [], PassKind.OBSERVE,  # type: ignore[arg-type]
                                  seen._replace(probe=None), None))
    assert status_facts.gather(body, GatewaySpec.parse(body["spec"]), fresh.outcome, [], time.time()).dedup.lost_at


def test_a_missing_secret_stops_the_pass_before_anything_is_written() -> None:
    kube = ApiStandIn()
    result, prober = run(kube, gateway(REDIS_SPEC))
    assert result.outcome.problem is not None and result.outcome.problem.reason == R.SECRET_NOT_FOUND
    assert "redis-auth" in result.outcome.problem.message
    assert kube.deployment() is None and prober.calls == 0
    assert result.inputs is None


def test_the_replica_guard_is_reported_and_one_replica_applied_despite_it() -> None:
    kube = ApiStandIn()
    result, _ = run(kube, gateway({"replicas": 3}))          # Refuse (the default) without Redis
    assert result.outcome.problem is not None and result.outcome.problem.reason == R.REPLICA_POLICY_VIOLATION
    assert kube.deployment()["spec"]["replicas"] == 1


def test_an_object_in_the_way_wins_over_the_replica_guard() -> None:
    foreign = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "bot", "namespace": "ns"}}
    kube = ApiStandIn([foreign])
    result, _ = run(kube, gateway({"replicas": 3}))
    assert result.outcome.problem is not None and result.outcome.problem.reason == R.OBJECT_NOT_OWNED
    assert "Service bot already exists" in result.outcome.problem.message
    assert kube.objects[("v1", "Service", "ns", "bot")] == foreign   # left alone


def test_a_refused_write_is_apply_failed_with_the_api_servers_words() -> None:
    kube = ApiStandIn()
    kube.refuse_apply = ApiException(status=422, reason="Unprocessable")
    kube.refuse_apply.body = '{"message": "spec.template: Invalid value"}'
    result, _ = run(kube, gateway({}))
    assert result.outcome.problem == Problem(R.APPLY_FAILED, "the API server refused a change: spec.template: "
                                                             "Invalid value")


def forbidden(cause: str) -> ApiException:
    e = ApiException(status=403, reason="Forbidden")
    e.body = ('{"kind": "Status", "message": "configmaps \\"bot-gateway-config\\" is forbidden: unable to create new '
              'content in namespace ns because it is being terminated", "reason": "Forbidden", "code": 403, '
              '"details": {"causes": [{"reason": "%s", "message": "namespace ns is being terminated"}]}}' % cause)
    return e


def test_a_namespace_being_deleted_is_no_problem_to_report() -> None:
    """The namespace controller deletes the gateway's objects before the GatewayDeployment: the
    pass that finds them gone and may not create them again stays quiet (no Stalled flip)."""
    kube = ApiStandIn()
    kube.refuse_apply = forbidden("NamespaceTerminating")
    result, _ = run(kube, gateway({}))
    assert result.outcome.problem is None
    kube.refuse_apply = forbidden("SomethingElse")   # any other refusal still is one
    result, _ = run(kube, gateway({}))
    assert result.outcome.problem is not None and result.outcome.problem.reason == R.APPLY_FAILED
    assert "being terminated" in result.outcome.problem.message


class TerminatingApiStandIn(ApiStandIn):
    """The stand-in once the namespace is being deleted: its generated Secrets already removed, and
    every create refused (NamespaceTerminating)."""

    def create_if_absent(self, manifest: Mapping[str, Any], owner_uid: str) -> tuple[bool, dict[str, Any] | None]:
        if self.get(manifest["apiVersion"], manifest["kind"], manifest["metadata"]["namespace"],
                    manifest["metadata"]["name"]) is None:
            raise forbidden("NamespaceTerminating")
        return super().create_if_absent(manifest, owner_uid)


def test_the_passes_after_a_namespace_began_terminating_report_no_missing_secret() -> None:
    """The namespace controller removed the generated Secret before the GatewayDeployment. The full
    pass that may not create it again stays quiet, and so do the observation passes after it: they
    keep the Secret inputs read before instead of reading the removed Secret (SecretNotFound)."""
    kube = ApiStandIn()
    first, _ = run(kube, gateway({}))
    assert first.inputs is not None
    terminating = TerminatingApiStandIn([o for o in kube.objects.values() if o["kind"] != "Secret"])
    full, _ = run(terminating, gateway({}), seen=Observation(deployment=_watched(kube), inputs=first.inputs))
    assert full.outcome.problem is None and full.inputs == first.inputs
    observed, _ = run(terminating, gateway({}), kind=PassKind.OBSERVE,
                      seen=Observation(deployment=_watched(kube), inputs=full.inputs))
    assert observed.outcome.problem is None, observed.outcome.problem


def test_a_crash_looping_replica_is_reported_below_a_refused_write() -> None:
    crashing = [PodView("bot-1", "u", "198.18.0.9", False, False, waiting_reason="CrashLoopBackOff")]
    result, _ = run(ApiStandIn(), gateway({}), pods=crashing)
    assert result.outcome.problem is not None and result.outcome.problem.reason == R.CRASH_LOOP
    kube = ApiStandIn()
    kube.refuse_apply = ApiException(status=500, reason="Internal")
    result, _ = run(kube, gateway({}), pods=crashing)
    assert result.outcome.problem is not None and result.outcome.problem.reason == R.APPLY_FAILED


def test_an_unforeseen_error_becomes_a_problem_not_a_crash() -> None:
    class Broken(ApiStandIn):
        def get(self, *args: Any) -> dict[str, Any] | None:
            raise RuntimeError("a bug, quoting input: hunter2")

    result, _ = run(Broken(), gateway({}))
    assert result.outcome.problem is not None and result.outcome.problem.reason == R.RECONCILE_ERROR
    assert "hunter2" not in result.outcome.problem.message and isinstance(result.outcome.error, RuntimeError)


def _watched(kube: ApiStandIn) -> Any:
    from gateway_operator.core.pods import live_deployment
    d = copy.deepcopy(kube.deployment())
    d.setdefault("status", {"readyReplicas": 3, "updatedReplicas": 3, "observedGeneration": d["metadata"]["generation"]})
    return live_deployment(d)


# -- the rollouts the operator causes itself: a few at a time --------------------------------------

def _upgraded(kube: ApiStandIn, rolled_out: bool = True) -> None:
    """As if an older operator release had written the Deployment: another template."""
    d = kube.deployment()
    d["metadata"]["annotations"][api.ANNOTATION_TEMPLATE_HASH] = "from-an-older-release"
    generation = d["metadata"]["generation"]
    d["status"] = ({"observedGeneration": generation, "replicas": 3, "readyReplicas": 3, "updatedReplicas": 3}
                   if rolled_out else {"observedGeneration": generation})


def _template_hash(kube: ApiStandIn) -> str:
    return kube.deployment()["metadata"]["annotations"][api.ANNOTATION_TEMPLATE_HASH]


def test_an_operator_caused_rollout_waits_for_a_slot_and_a_spec_change_never_does() -> None:
    kube = ApiStandIn([secret("redis-auth", password="pw")])
    run(kube, gateway(REDIS_SPEC))
    config_before = copy.deepcopy(kube.objects[("v1", "ConfigMap", "ns", "bot-gateway-config")])
    _upgraded(kube)
    gate = RolloutGate(limit=1)
    assert gate.admit(("other", "gw"), time.monotonic())    # the one slot is taken
    reconciled = gateway(REDIS_SPEC, observedGeneration=1)  # status: the spec did not change since
    result, _ = run(kube, reconciled, rollouts=gate)
    assert result.outcome.problem is None and result.outcome.rollout is RolloutState.QUEUED
    assert _template_hash(kube) == "from-an-older-release"  # the pods are left as they are ...
    assert kube.objects[("v1", "ConfigMap", "ns", "bot-gateway-config")] == config_before  # ... and what they read
    # the user's own change is never queued
    changed = gateway(REDIS_SPEC, observedGeneration=1)
    changed["metadata"]["generation"] = 2
    result, _ = run(kube, changed, rollouts=gate)
    assert result.outcome.rollout is RolloutState.NONE and _template_hash(kube) != "from-an-older-release"
    assert not gate.holds(("ns", "bot"))


def test_the_managed_redis_is_never_held_behind_the_gateways_queue() -> None:
    kube = ApiStandIn()
    managed = {"replicas": 3, "redis": {"managed": {"enabled": True}}, "config": {"hooks": {"idempotency": {"store_backend": "redis"}}}}
    run(kube, gateway(managed))
    redis = next(k for k in kube.objects if k[1] == "Deployment" and k[3] != "bot")
    _upgraded(kube)
    kube.objects[redis]["spec"]["replicas"] = 0            # drifted: the pass puts it back
    gate = RolloutGate(limit=1)
    assert gate.admit(("other", "gw"), time.monotonic())
    result, _ = run(kube, gateway(managed, observedGeneration=1), rollouts=gate)
    assert result.outcome.rollout is RolloutState.QUEUED and _template_hash(kube) == "from-an-older-release"
    assert kube.objects[redis]["spec"]["replicas"] == 1


def _after_an_upgrade() -> tuple[ApiStandIn, RolloutGate, tuple[str, str], dict[str, Any]]:
    """A reconciled GatewayDeployment whose Deployment an older release wrote, and a gate of one slot."""
    kube = ApiStandIn([secret("redis-auth", password="pw")])
    run(kube, gateway(REDIS_SPEC))
    _upgraded(kube)
    return kube, RolloutGate(limit=1), ("ns", "bot"), gateway(REDIS_SPEC, observedGeneration=1)


def _reconciling(body: Mapping[str, Any], outcome: Any) -> C.Condition:
    facts = status_facts.gather(body, GatewaySpec.parse(body["spec"]), outcome, [], time.time())
    return next(c for c in C.compute(facts) if c.type == C.RECONCILING)


def test_a_slot_is_taken_then_given_back_once_the_new_template_is_ready() -> None:
    kube, gate, key, reconciled = _after_an_upgrade()
    result, _ = run(kube, reconciled, rollouts=gate)
    assert result.outcome.rollout is RolloutState.OPERATOR and gate.holds(key)
    assert _template_hash(kube) != "from-an-older-release"
    assert not gate.admit(("other", "gw"), time.monotonic())  # the next one waits
    # the watch still shows the Deployment as it was before the apply: not done yet
    stale = _watched(kube)._replace(observed=_watched(kube).observed._replace(generation=1))
    result, _ = run(kube, reconciled, kind=PassKind.OBSERVE, rollouts=gate, seen=Observation(deployment=stale))
    assert result.outcome.rollout is RolloutState.OPERATOR and gate.holds(key)
    d = kube.deployment()
    d["status"] = {"observedGeneration": d["metadata"]["generation"], "replicas": 3, "readyReplicas": 3,
                   "updatedReplicas": 3}
    result, _ = run(kube, reconciled, kind=PassKind.OBSERVE, rollouts=gate, seen=Observation(deployment=_watched(kube)))
    assert result.outcome.rollout is RolloutState.NONE and not gate.holds(key)
    assert gate.admit(("other", "gw"), time.monotonic())


def test_a_queued_rollout_says_so_between_full_passes_and_looks_again_soon() -> None:
    """The upgrade test found observation passes saying ReconcileComplete while queued."""
    kube = ApiStandIn([secret("redis-auth", password="pw")])
    run(kube, gateway(REDIS_SPEC))
    _upgraded(kube)
    gate, key = RolloutGate(limit=1), ("ns", "bot")
    assert gate.admit(("other", "gw"), time.monotonic())
    reconciled = gateway(REDIS_SPEC, observedGeneration=1)
    result, _ = run(kube, reconciled, rollouts=gate)
    assert result.outcome.rollout is RolloutState.QUEUED
    observed, _ = run(kube, reconciled, kind=PassKind.OBSERVE, rollouts=gate, seen=Observation(deployment=_watched(kube)))
    assert observed.outcome.rollout is RolloutState.QUEUED
    reconciling = _reconciling(reconciled, observed.outcome)
    assert (reconciling.status, reconciling.reason) == ("True", R.OPERATOR_UPGRADE_QUEUED)
    gate.done(("other", "gw"))  # the slot frees: the next full pass takes it, and the queue forgets it
    result, _ = run(kube, reconciled, rollouts=gate)
    assert result.outcome.rollout is RolloutState.OPERATOR and not gate.queued(key)


def test_the_slot_is_held_until_no_old_replica_is_left() -> None:
    """Updated and ready are not done while an old pod still runs (status.replicas over spec.replicas)."""
    kube, gate, key, reconciled = _after_an_upgrade()
    run(kube, reconciled, rollouts=gate)
    d = kube.deployment()
    d["status"] = {"observedGeneration": d["metadata"]["generation"], "replicas": 4, "readyReplicas": 4,
                   "updatedReplicas": 3}
    result, _ = run(kube, reconciled, kind=PassKind.OBSERVE, rollouts=gate, seen=Observation(deployment=_watched(kube)))
    assert result.outcome.rollout is RolloutState.OPERATOR and gate.holds(key)
    reconciling = _reconciling(reconciled, result.outcome)
    assert (reconciling.status, reconciling.reason) == ("True", R.ROLLING_OUT)
    d["status"]["replicas"] = 3
    result, _ = run(kube, reconciled, kind=PassKind.OBSERVE, rollouts=gate, seen=Observation(deployment=_watched(kube)))
    assert result.outcome.rollout is RolloutState.NONE and not gate.holds(key)


# -- the precedence table ----------------------------------------------------------------------------

def test_winner_follows_the_table_whatever_the_order_found() -> None:
    guard, owned = Problem(R.REPLICA_POLICY_VIOLATION, "a"), Problem(R.OBJECT_NOT_OWNED, "b")
    crash = Problem(R.CRASH_LOOP, "c")
    assert problems.winner([None, guard, crash, owned]) == owned
    assert problems.winner([crash, guard]) == guard
    assert problems.winner([None, None]) is None


def test_every_problem_the_operator_raises_has_a_place_in_the_table() -> None:
    """A reason left out would lose to every other problem by accident."""
    raised = set()
    for path in _modules().values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Problem" and node.args:
                first = node.args[0]
                if isinstance(first, ast.Attribute) and getattr(first.value, "id", "") in ("R", "reasons"):
                    raised.add(getattr(R, first.attr))
    assert raised, "found no Problem(...) at all: the scan is broken"
    assert raised - set(problems.PRECEDENCE) == set()
    assert len(problems.PRECEDENCE) == len(set(problems.PRECEDENCE))


# -- the Events table ---------------------------------------------------------------------------------

def transition(type_: str, old: str | None, status: str, reason: str = "R", message: str = "m") -> Transition:
    return Transition(type_, old, {"type": type_, "status": status, "reason": reason, "message": message})


@pytest.mark.parametrize("t, event", [
    (transition(C.STALLED, "False", "True", R.APPLY_FAILED), ("Warning", R.APPLY_FAILED, "m")),
    (transition(C.STALLED, "True", "False"), None),
    (transition(C.IDEMPOTENCY_DEGRADED, "False", "True", "BuildTimeFallback"), ("Warning", "IdempotencyDegraded", "m")),
    (transition(C.IDEMPOTENCY_DEGRADED, "True", "False"),
     ("Normal", "IdempotencyRecovered", "no replica reports durability:idempotency any more")),
    (transition(C.IDEMPOTENCY_DEGRADED, None, "False"), None),
    (transition(C.REDIS_REACHABLE, "True", "False"), ("Warning", "RedisUnreachable", "m")),
    (transition(C.REDIS_REACHABLE, "False", "True"), ("Normal", "RedisReachable", "m")),
    (transition(C.REDIS_REACHABLE, "Unknown", "True"), None),
    (transition(C.REDIS_DURABLE, "True", "False", R.PERSISTENCE_OFF), ("Warning", R.PERSISTENCE_OFF, "m")),
    (transition(C.REDIS_TLS_VERIFIED, None, "False", R.TLS_VERIFICATION_DISABLED),
     ("Warning", R.TLS_VERIFICATION_DISABLED, "m")),
    (transition(C.EXACTLY_ONCE, "True", "False", R.PER_REPLICA_STORES), ("Warning", "ExactlyOnceNotHeld", "m")),
    (transition(C.EXACTLY_ONCE, "True", "False", R.REDIS_UNREACHABLE), None),
    (transition(C.EXACTLY_ONCE, "False", "True"), ("Normal", "ExactlyOnceAdmission", "m")),
    (transition(C.EXACTLY_ONCE, None, "True"), None),
    (transition(C.READY, "True", "False"), None),
])
def test_events_table(t: Transition, event: tuple[str, str, str] | None) -> None:
    assert events.event_for(t) == event


# -- the layering, read from the folders: the pure core apart from I/O, and no cycles -------------------

#: the package's folders, lowest first: a module imports only from its own layer or a lower one
#: (the command line, cli.py and offline.py, sits on top; pod/ is the pods' code, not the operator's)
LAYERS = ("api", "core", "clients", "loop")
#: the one module of pod/ the operator imports: the operator-pod contract (standard library only), below every layer
CONTRACT = "pod.gwop_contract"
PURE_LAYERS = ("api", "core")   # the API and its rules, and the pure core that decides: no I/O
IO = ("kopf", "kubernetes.client", "kubernetes.dynamic", "redis", "aiohttp", "asyncio", "socket")


def _modules() -> dict[str, Path]:
    """Every operator module by its name under the package ("core.render"; "api" for api/__init__)."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if (parts[0] == "pod" and ".".join(parts) != CONTRACT) or parts == ("__init__",):
            continue
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _layer(module: str) -> int:
    if module == CONTRACT:
        return -1
    top = module.split(".")[0]
    return LAYERS.index(top) if top in LAYERS else len(LAYERS)


def _imports() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found = graph.setdefault(name, set())
        for node in ast.parse(path.read_text()).body:  # module level: what loads with the module
            if isinstance(node, ast.ImportFrom) and node.level:
                found.add("relative:" + (node.module or ""))
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("gateway_operator"):
                base = node.module.removeprefix("gateway_operator").lstrip(".")
                for alias in node.names:
                    target = f"{base}.{alias.name}" if base else alias.name
                    found.add(target if target in modules else base)
            elif isinstance(node, ast.ImportFrom) and node.module:
                found.add("ext:" + node.module)
            elif isinstance(node, ast.Import):
                found.update("ext:" + a.name for a in node.names)
    return graph


def test_the_package_is_laid_out_by_layer() -> None:
    """Every module sits in a layer's folder (or is the command line), imports its package by absolute
    names, and only from its own layer or a lower one."""
    graph = _imports()
    assert {m.split(".")[0] for m in graph} == {*LAYERS, "cli", "offline", "pod"}, sorted(graph)
    for module, targets in graph.items():
        assert not [t for t in targets if t.startswith("relative:")], (module, "imports relatively")
        upward = sorted(t for t in targets if not t.startswith("ext:") and _layer(t) > _layer(module))
        assert not upward, f"{module} ({LAYERS[_layer(module)] if _layer(module) < len(LAYERS) else 'top'}) " \
                           f"imports from a higher layer: {upward}"


def test_the_package_has_no_import_cycle() -> None:
    graph, done, path = _imports(), set(), []  # type: ignore[var-annotated]

    def visit(module: str) -> None:
        assert module not in path, f"import cycle: {' -> '.join(path[path.index(module):] + [module])}"
        if module in done or module not in graph:
            return
        path.append(module)
        for target in graph[module]:
            visit(target)
        path.pop()
        done.add(module)

    for module in graph:
        visit(module)
    assert len(done) > 20


def test_when_next_is_decided_in_the_schedule_alone() -> None:
    """The backoff, the resync and the rechecks are the schedule's (controller-runtime's queue owns
    the backoff): no other module computes when a pass comes back."""
    owned = {"backoff", "resync_after", "requeue_after", "PROBLEM_BACKOFF", "QUEUED_RECHECK_S", "publish_wait"}
    for path in _modules().values():
        if path.stem == "schedule":
            continue
        tree = ast.parse(path.read_text())
        named = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)} | \
                {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
        assert not named & (owned - {"publish_wait"} if path.stem == "controller" else owned), path.stem
    assert "requeue_after" not in ReconcileResult._fields


def test_the_pure_core_does_no_io() -> None:
    graph = _imports()
    pure = [m for m in graph if m.split(".")[0] in PURE_LAYERS]
    assert len(pure) > 25
    for module in pure:
        io = sorted(i for i in graph[module] if i.startswith("ext:") and i[4:].startswith(IO))
        assert io in ([], ["ext:kubernetes.client.exceptions"]), (module, io)  # ApiException only, to name a refusal


def test_the_core_reads_no_file() -> None:
    """The core's inputs are handed in, the pods' code too (gateway_operator.pod.pod_code, read by the
    entry points): no module under core/ (the render's included) imports a file API or opens a file."""
    graph = _imports()
    core = [m for m in graph if m.split(".")[0] == "core"]
    assert "core.render.objects" in core and "core.render.gateway_config" in core
    files = ("ext:pathlib", "ext:os", "ext:io", "ext:shutil", "ext:importlib", "ext:glob")
    for module in core:
        assert not [i for i in graph[module] if i.startswith(files)], module
        tree = ast.parse(_modules()[module].read_text())
        calls = {n.func.id if isinstance(n.func, ast.Name) else "." + n.func.attr for n in ast.walk(tree)
                 if isinstance(n, ast.Call) and isinstance(n.func, (ast.Name, ast.Attribute))}
        assert not calls & {"open", ".read_text", ".read_bytes", ".glob", ".iterdir"}, module


def test_no_module_names_what_it_never_defined() -> None:
    """pyflakes over the operator, the tests, bench/ and hack/: a name used but never defined (a
    move between layers that left a reference behind fails only when that line runs: in a kopf
    index handler, it left a foreign Ingress's host unclaimed), and an import nothing uses."""
    from pyflakes.api import checkPath
    from pyflakes.reporter import Reporter

    out, err = io.StringIO(), io.StringIO()
    root = PACKAGE.parents[1]
    files = [p for d in ("operator", "tests", "bench", "hack") for p in sorted((root / d).rglob("*.py"))]
    assert len(files) > 100
    found = sum(checkPath(str(p), Reporter(out, err)) for p in files)
    assert found == 0, out.getvalue() + err.getvalue()
