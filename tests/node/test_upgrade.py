"""An operator upgrade on the REAL node (issue 22: upgrades that never roll every gateway at once).

The release of an EARLIER commit (``EARLIER``: its own chart, and its operator image built by its
own hack/images.sh: harness.earlier) is helm-installed on the session's control plane with the real
node and runs six GatewayDeployments of the real gateway image: one SQLite replica on a PVC
(Recreate) and two or three replicas on a managed Redis (RollingUpdate), in two namespaces, every
one exposed at the node's edge. A steady webhook stream reaches all of them, as a provider sends
it: each message once through the edge (its HTTPRoute's host) and again a few seconds later to one
of its ready pods (a redelivery the dedup store must answer), every delivery without a 2xx retried;
the LLM STAND-IN (the one stand-in) counts the agent turns. Then ``helm upgrade`` to this tree's
chart and operator image (the ones every other test uses; the CRD applied first, as
docs/install.md says). The earlier launcher differs, so every GatewayDeployment must roll; the
chart's default ``maxConcurrentRollouts`` (2) must hold them to two at a time, the others saying
``Reconciling=True OperatorUpgradeQueued`` while their pods serve on.

Watches of the GatewayDeployments, Deployments, ReplicaSets and pods record every change as it
arrives; from them the module's tests judge: the rollouts at once, the queue, the time until every
GatewayDeployment is Ready on the new template, the webhooks lost and run twice, and the conditions
(a condition's lastTransitionTime moves only when its status flips; Ready stays True where the
replicas kept serving). The figures are printed, and written as JSON to ``$GWOP_UPGRADE_JSON``
when it is set (``$GWOP_UPGRADE_RECORDS``: every watched change, delivery and turn, as JSON lines).
The release is installed with ``watchNamespaces`` (the two namespaces): the operator CLI the other
modules share is stopped for this module, and nothing else in the cluster is reconciled by it. An
operator so limited cannot read the edge's Gateway, so status.expose carries no address; the
HTTPRoute's own status says the edge took it. Needs root (the real node); without it the module
skips in one line, under CI it fails.
"""
from __future__ import annotations

import heapq
import json
import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import yaml

from gateway_operator import api
from gateway_operator.api import reasons
from gateway_operator.core.render.gateway_config import config_hash
from gateway_operator.core.render.names import config_map_name
from gateway_operator.pod import pod_code

from harness import earlier, llm_pod, node
from harness.cluster import REPO, Cluster
from harness.gateways import is_ready
from harness.wait import WaitTimeout, until

# `make test-upgrade` runs it (about 20 minutes: an earlier release's operator image is built from git
# history); `make test` leaves it out
pytestmark = pytest.mark.skipif(os.environ.get("GWOP_UPGRADE_TEST") != "1",
                                reason="the operator upgrade test runs with make test-upgrade")

# The landing commit of the exactly-once stop (issue 18), the last before issue 20's own-Redis work
# (f56d95c) changed the launcher. Its launcher (launch.py in every GatewayDeployment's ConfigMap) is
# not this tree's, and nothing else it renders differs from this tree (`gateway-operator render` of
# examples/ with both trees: only launch.py and so the pod template's config-hash; the managed
# Redis's objects are the same), so on the upgrade every GatewayDeployment must roll, and only
# through the launcher. (The commit before the rollout cap, a4a449b, renders this tree's pod
# templates exactly, tests/golden unchanged since 6bd4746: nothing would roll.) It installs with its
# own chart and CRD; its images.sh builds its operator image the way this tree's does.
EARLIER = "be2ae43e4fae579d8d7da579330ab1b72c27227d"
CAP = 2  # the chart's default maxConcurrentRollouts, left as it is
# (namespace, name, replicas): 1 is one SQLite replica on a PVC, more are on a managed Redis each
GATEWAYS = (("a", "solo-a", 1), ("a", "solo-b", 1), ("a", "duo-a", 2),
            ("b", "solo-c", 1), ("b", "duo-b", 2), ("b", "trio", 3))
PERIOD_S = 3.0                # a new message to each GatewayDeployment this often
REDELIVERY_S = (2.0, 8.0)     # the redelivery to a pod, this long after the first delivery
SETTLED_ROUNDS = 3            # the stream goes on this many rounds after every GatewayDeployment is done
UPGRADE_TIMEOUT_S = 900.0
COMPONENTS = "app.kubernetes.io/component in (gateway,redis)"
GROUP_PATH = ("gateway-operator.dev", "v1alpha1", "gatewaydeployments")


@dataclass(frozen=True)
class Gateway:
    namespace: str
    name: str
    replicas: int

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def host(self) -> str:
        return f"{self.name}.{self.namespace}.upgrade.test"

    @property
    def store(self) -> str:
        return "redis" if self.replicas > 1 else "sqlite"


def manifest(gw: Gateway, llm_env: dict[str, str]) -> dict[str, Any]:
    """The example of its kind (examples/gateway-single.yaml, examples/gateway-managed-redis.yaml),
    renamed, pointed at the LLM stand-in, exposed at the edge under a host of its own, its hook
    keeping each conversation's session."""
    example = "gateway-single.yaml" if gw.replicas == 1 else "gateway-managed-redis.yaml"
    body = yaml.safe_load((REPO / "examples" / example).read_text())
    body["metadata"] = {"name": gw.name, "namespace": gw.namespace}
    spec = body["spec"]
    spec.update(image=node.images().gateway, imagePullPolicy="Never",
                env=[{"name": k, "value": v} for k, v in llm_env.items()],
                health={"intervalSeconds": 2, "timeoutSeconds": 1},
                expose={"httpRoute": {"parentRefs": [{"name": "edge", "namespace": "gwop-edge"}],
                                      "hostnames": [gw.host]}})
    if gw.replicas > 1:
        spec["replicas"] = gw.replicas
    spec["config"]["hooks"]["hooks"][0]["session_key"] = "{session}"
    return body


# -- watches -------------------------------------------------------------------------------

@dataclass
class Record:
    at: float
    kind: str
    type: str   # ADDED, MODIFIED, DELETED
    obj: dict[str, Any]

    @property
    def key(self) -> str:
        return f"{self.obj['metadata']['namespace']}/{self.obj['metadata']['name']}"


class Watcher:
    """Every change of one kind of object in ``namespaces``, as it arrived: one watch, resumed from
    its last resourceVersion (listed again only when the API server says that expired)."""

    def __init__(self, cluster: Cluster, kind: str, namespaces: set[str], sink: list[Record],
                 lock: threading.Lock) -> None:
        from kubernetes import client, config
        api_client = config.new_client_from_config(str(cluster.kubeconfig))
        apps, core, custom = client.AppsV1Api(api_client), client.CoreV1Api(api_client), \
            client.CustomObjectsApi(api_client)
        self.list: Callable[..., Any] = {
            "gatewaydeployments": lambda **kw: custom.list_cluster_custom_object(*GROUP_PATH, **kw),
            "deployments": lambda **kw: apps.list_deployment_for_all_namespaces(label_selector=COMPONENTS, **kw),
            "replicasets": lambda **kw: apps.list_replica_set_for_all_namespaces(label_selector=COMPONENTS, **kw),
            "pods": lambda **kw: core.list_pod_for_all_namespaces(label_selector=COMPONENTS, **kw),
        }[kind]
        self.kind, self.namespaces, self.sink, self.lock = kind, namespaces, sink, lock
        self.state: dict[str, dict[str, Any]] = {}
        self.restarts = 0
        self.last_error = ""
        self.last_event_at = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"watch-{kind}", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        from kubernetes import watch
        version = None
        while not self._stop.is_set():
            try:
                # the server ends each watch after 20 s; a connection that stays silent longer than
                # that is a dead one (the client's read timeout), opened again from where it was
                kw: dict[str, Any] = {"timeout_seconds": 20, "allow_watch_bookmarks": True, "deserialize": False,
                                      "_request_timeout": (5, 35)}
                if version:
                    kw["resource_version"] = version
                for event in watch.Watch().stream(self.list, **kw):
                    obj, kind = event["object"], event["type"]
                    if kind == "ERROR":  # 410 Gone: list again
                        version = None
                        self.restarts += 1
                        self.last_error = json.dumps(obj)[:300]
                        break
                    version = obj["metadata"]["resourceVersion"]
                    self.last_event_at = time.time()
                    if kind == "BOOKMARK" or obj["metadata"].get("namespace") not in self.namespaces:
                        continue
                    record = Record(time.time(), self.kind, kind, obj)
                    with self.lock:
                        if kind == "DELETED":
                            self.state.pop(record.key, None)
                        else:
                            self.state[record.key] = obj
                        self.sink.append(record)
                    if self._stop.is_set():
                        return
            except Exception as e:  # noqa: BLE001 - a watch that fails is listed and opened again
                # (an ERROR event, e.g. the resourceVersion gone when the CRD changed, raises in the
                # client without deserialize: resuming from it would fail the same way for ever)
                version = None
                self.restarts += 1
                self.last_error = f"{type(e).__name__}: {e}"[:300]
                time.sleep(0.5)

    def stop(self) -> None:
        self._stop.set()


class Watches:
    def __init__(self, cluster: Cluster, namespaces: set[str]) -> None:
        self.records: list[Record] = []
        self.lock = threading.Lock()
        self.by_kind = {kind: Watcher(cluster, kind, namespaces, self.records, self.lock)
                        for kind in ("gatewaydeployments", "deployments", "replicasets", "pods")}

    def ready_pod_ips(self, gw: Gateway) -> list[str]:
        with self.lock:
            pods = list(self.by_kind["pods"].state.values())
        return [p["status"]["podIP"] for p in pods if p["metadata"]["namespace"] == gw.namespace
                and (p["metadata"].get("labels") or {}).get(api.LABEL_INSTANCE) == gw.name
                and (p["metadata"].get("labels") or {}).get(api.LABEL_COMPONENT) == "gateway" and is_ready(p)]

    def snapshot(self) -> list[Record]:
        with self.lock:
            return sorted(self.records, key=lambda r: r.at)

    def stop(self) -> None:
        for w in self.by_kind.values():
            w.stop()


# -- the webhook stream --------------------------------------------------------------------

@dataclass
class Delivery:
    msg: str
    gateway: str
    copy: str        # "edge" (the first delivery) or "pod" (the redelivery)
    attempt: int
    sent: float
    done: float
    status: int | None
    deduplicated: bool = False
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


class Stream:
    """A steady stream of webhooks to every GatewayDeployment, as a provider sends them: a new
    message to each every PERIOD_S; its first delivery through the edge, its redelivery a few
    seconds later to one of the gateway's ready pods; a delivery without a 2xx (refused, 503, no
    ready pod) is retried after 1, 2, 4, then every 5 s (or the gateway's Retry-After), until it
    gets one."""

    def __init__(self, gateways: list[Gateway], tokens: dict[str, str], watches: Watches, seed: int = 22) -> None:
        self.gateways, self.tokens, self.watches = gateways, tokens, watches
        self.rng = random.Random(seed)
        self.deliveries: list[Delivery] = []
        self.messages: dict[str, Gateway] = {}
        self.sessions: dict[str, str] = {}         # msg -> its conversation (the hook's session_key)
        self.confirmed: dict[str, set[str]] = {}   # msg -> the copies answered 2xx
        self._cv = threading.Condition()
        self._queue: list[tuple[float, int, str, str, int]] = []
        self._seq = 0
        self._pending = 0
        self._making = threading.Event()
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(32, thread_name_prefix="webhook")
        self._threads = [threading.Thread(target=self._make, daemon=True),
                         threading.Thread(target=self._run, daemon=True)]

    def start(self) -> "Stream":
        self._making.set()
        for t in self._threads:
            t.start()
        return self

    def _push(self, at: float, msg: str, copy: str, attempt: int) -> None:
        with self._cv:
            self._seq += 1
            self._pending += 1
            heapq.heappush(self._queue, (at, self._seq, msg, copy, attempt))
            self._cv.notify_all()

    def _make(self) -> None:
        n = 0
        while self._making.is_set() and not self._stop.is_set():
            start = time.time()
            for i, gw in enumerate(self.gateways):  # spread over the period
                msg = f"u{n:04d}-{gw.namespace[-4:]}-{gw.name}"
                with self._cv:
                    self.messages[msg] = gw
                    self.sessions[msg] = f"{gw.name}-{n % 4}"
                    self.confirmed[msg] = set()
                at = start + i * PERIOD_S / len(self.gateways)
                self._push(at, msg, "edge", 0)
                self._push(at + self.rng.uniform(*REDELIVERY_S), msg, "pod", 0)
            n += 1
            self._stop.wait(max(0.0, start + PERIOD_S - time.time()))

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._cv:
                if not self._queue:
                    self._cv.wait(0.5)
                    continue
                at, _, msg, copy, attempt = self._queue[0]
                now = time.time()
                if at > now:
                    self._cv.wait(min(at - now, 0.5))
                    continue
                heapq.heappop(self._queue)
            self._pool.submit(self._deliver, msg, copy, attempt)

    def _deliver(self, msg: str, copy: str, attempt: int) -> None:
        gw = self.messages[msg]
        sent, status, dedup, error, retry_after = time.time(), None, False, "", 0.0
        try:
            if copy == "edge":
                address = gw.host
            else:
                ips = self.watches.ready_pod_ips(gw)
                if not ips:
                    raise LookupError("no ready pod")
                address = self.rng.choice(ips)
            session = self.sessions[msg]
            answer = node.webhook(address, self.tokens[gw.key], msg, f"msg={msg} session={session}", timeout=60,
                                  session=session)
            status, dedup = answer.status, bool(answer.body.get("deduplicated"))
            if answer.body.get("in_progress"):
                retry_after = 10.0
        except Exception as e:  # noqa: BLE001 - refused, reset, timed out: a record, and a retry
            error = f"{type(e).__name__}: {e}"[:200]
        d = Delivery(msg, gw.key, copy, attempt, sent, time.time(), status, dedup, error)
        with self._cv:
            self.deliveries.append(d)
            if d.ok:
                self.confirmed[msg].add(copy)
        if not d.ok and not self._stop.is_set():
            self._push(time.time() + (retry_after or min(2 ** attempt, 5)), msg, copy, attempt + 1)
        with self._cv:
            self._pending -= 1
            self._cv.notify_all()

    def stop_making(self) -> None:
        self._making.clear()

    def drain(self, timeout: float) -> int:
        """Waits until every delivery got its 2xx (retries included); returns those still pending."""
        deadline = time.time() + timeout
        with self._cv:
            while self._pending and time.time() < deadline:
                self._cv.wait(1.0)
            return self._pending

    def stop(self) -> None:
        self._making.clear()
        self._stop.set()
        self._pool.shutdown(wait=False, cancel_futures=True)


def answered_by(stream: Stream, count: int, timeout: float = 120) -> None:
    """Until the stream's first ``count`` messages were answered, both copies (the stream runs meanwhile)."""
    until(lambda: len(stream.messages) >= count and all(
        stream.confirmed[m] == {"edge", "pod"} for m in list(stream.messages)[:count]),
          timeout=timeout, interval=1, what=f"the stream's first {count} messages answered")


def llm_turns(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    import urllib.request
    ip = llm_pod.pod_ip(cluster, namespace)
    with urllib.request.urlopen(f"http://{ip}:{llm_pod.PORT}/turns", timeout=30) as r:
        return json.loads(r.read())["turns"]


# -- the analysis (pure: the records in, figures out) ---------------------------------------

def template_hash_of(obj: dict[str, Any]) -> str:
    return (((obj.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("annotations", {}).get(
        api.ANNOTATION_CONFIG_HASH, "")


def pod_hash(pod: dict[str, Any]) -> str:
    return (pod["metadata"].get("annotations") or {}).get(api.ANNOTATION_CONFIG_HASH, "")


def owner_name(obj: dict[str, Any]) -> str:
    return (obj["metadata"].get("labels") or {}).get(api.LABEL_INSTANCE, "")


def component(obj: dict[str, Any]) -> str:
    return (obj["metadata"].get("labels") or {}).get(api.LABEL_COMPONENT, "")


def deployment_complete(d: dict[str, Any]) -> bool:
    """The Deployment controller finished: it saw the latest template, and every replica is of it,
    ready and available (pods being deleted are not counted)."""
    s, want = d.get("status") or {}, int((d.get("spec") or {}).get("replicas") or 0)
    return (int(s.get("observedGeneration") or 0) >= int(d["metadata"].get("generation") or 0)
            and int(s.get("updatedReplicas") or 0) == want and int(s.get("replicas") or 0) == want
            and int(s.get("readyReplicas") or 0) == want and int(s.get("availableReplicas") or 0) == want)


def conditions_of(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def gwd_settled(obj: dict[str, Any]) -> bool:
    found = conditions_of(obj)
    return ((obj.get("status") or {}).get("observedGeneration") == obj["metadata"].get("generation")
            and found.get("Ready", {}).get("status") == "True"
            and found.get("Reconciling", {}).get("status") == "False")


@dataclass
class Timeline:
    """Per GatewayDeployment: when its rollout ran (from the template's change until the Deployment
    controller finished; and until the last pod of the old template was gone), what its
    conditions said and when."""

    start: float | None = None
    end: float | None = None
    drained: float | None = None     # the last old-template pod deleted
    queued: list[float] = field(default_factory=list)         # records saying OperatorUpgradeQueued
    rolling_by_operator: list[tuple[float, bool]] = field(default_factory=list)  # (at, RollingOut)
    #: condition type -> its (at, status, reason, message) changes from the upgrade on
    transitions: dict[str, list[tuple[float, str, str, str]]] = field(default_factory=dict)
    flaps: list[dict[str, Any]] = field(default_factory=list)  # lastTransitionTime moved, status did not
    redis_pods_replaced: int = 0


def analyse(records: list[Record], gateways: list[Gateway], baseline: dict[str, str], t_up: float) -> dict[str, Any]:
    """``baseline``: each gateway Deployment's config-hash under the earlier release."""
    lines = {gw.key: Timeline() for gw in gateways}
    deployments: dict[str, dict[str, Any]] = {}
    replicasets: dict[str, dict[str, Any]] = {}
    pods: dict[str, dict[str, Any]] = {}
    gwds: dict[str, dict[str, Any]] = {}
    last_conditions: dict[tuple[str, str], dict[str, Any]] = {}
    redis_pods_before = set()
    all_settled_at = None
    for r in records:
        if r.kind == "gatewaydeployments":
            key = r.key
            if key not in lines:
                continue
            if r.type != "DELETED":
                gwds[key] = r.obj
            line = lines[key]
            for type_, c in conditions_of(r.obj).items():
                before = last_conditions.get((key, type_))
                if before is not None and before["lastTransitionTime"] != c["lastTransitionTime"] and \
                        before["status"] == c["status"] and r.at >= t_up:
                    line.flaps.append({"at_s": round(r.at - t_up, 1), "type": type_, "status": c["status"],
                                       "from": before["lastTransitionTime"], "to": c["lastTransitionTime"],
                                       "reason": f"{before['reason']} -> {c['reason']}", "message": c["message"]})
                changed = before is None or (before["status"], before["reason"]) != (c["status"], c["reason"])
                if r.at >= t_up and changed:
                    line.transitions.setdefault(type_, []).append((r.at, c["status"], c["reason"], c["message"]))
                last_conditions[(key, type_)] = c
            rec = conditions_of(r.obj).get("Reconciling", {})
            if r.at >= t_up:
                if rec.get("reason") == reasons.OPERATOR_UPGRADE_QUEUED:
                    line.queued.append(r.at)
                line.rolling_by_operator.append((r.at, rec.get("status") == "True"
                                                 and rec.get("reason") == reasons.ROLLING_OUT))
        elif r.kind == "deployments" and component(r.obj) == "gateway":
            key = r.key
            if key in lines:
                deployments[key] = r.obj
        elif r.kind == "replicasets" and component(r.obj) == "gateway":
            if r.type == "DELETED":
                replicasets.pop(r.key, None)
            else:
                replicasets[r.key] = r.obj
        elif r.kind == "pods":
            if r.type == "DELETED":
                gone = pods.pop(r.key, None)
                if gone is not None and component(gone) == "gateway":
                    gw_key = f"{gone['metadata']['namespace']}/{owner_name(gone)}"
                    line = lines.get(gw_key)
                    if line and r.at >= t_up and pod_hash(gone) == baseline.get(gw_key):
                        line.drained = r.at  # the latest such deletion wins: the last old pod gone
            else:
                pods[r.key] = r.obj
                if component(r.obj) == "redis" and r.at < t_up:
                    redis_pods_before.add(r.obj["metadata"]["uid"])
        if r.at < t_up:
            continue
        # the rollout of each gateway, from the state after this record
        for gw in gateways:
            d, line = deployments.get(gw.key), lines[gw.key]
            if d is None:
                continue
            changed = template_hash_of(d) != baseline[gw.key]
            if changed and line.start is None:
                line.start = r.at
            if line.start is not None and line.end is None and changed and deployment_complete(d):
                old = [rs for rs in replicasets.values() if rs["metadata"]["namespace"] == gw.namespace
                       and owner_name(rs) == gw.name and template_hash_of(rs) != template_hash_of(d)
                       and int((rs.get("status") or {}).get("replicas") or 0) > 0]
                if not old:
                    line.end = r.at
        if all_settled_at is None and all(
                lines[gw.key].end is not None and gw.key in gwds and gwd_settled(gwds[gw.key]) for gw in gateways):
            all_settled_at = r.at
    redis_now = {p["metadata"]["uid"] for p in pods.values() if component(p) == "redis"}

    def at_once(intervals: list[tuple[float, float]]) -> int:
        points = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals], key=lambda p: (p[0], p[1]))
        most = now = 0
        for _, step in points:
            now += step
            most = max(most, now)
        return most

    end_of_run = records[-1].at if records else t_up
    rollouts = [(line.start, line.end or end_of_run) for line in lines.values() if line.start is not None]
    draining = [(line.start, max(line.end or end_of_run, line.drained or 0)) for line in lines.values()
                if line.start is not None]
    operator_view = []
    for line in lines.values():
        since = None
        for at, rolling in line.rolling_by_operator:
            if rolling and since is None:
                since = at
            elif not rolling and since is not None:
                operator_view.append((since, at))
                since = None
        if since is not None:
            operator_view.append((since, end_of_run))
    # a free slot while a GatewayDeployment waited for one: how long the queue stood still
    waiting = [(line.queued[0], line.start) for line in lines.values()
               if line.queued and line.start is not None and line.queued[0] < line.start]
    bounds = sorted({t for pair in rollouts + waiting for t in pair})
    idle = longest = run = 0.0
    for a, b in zip(bounds, bounds[1:]):
        mid = (a + b) / 2
        if any(x <= mid < y for x, y in waiting) and sum(x <= mid < y for x, y in rollouts) < CAP:
            idle, run = idle + (b - a), run + (b - a)
            longest = max(longest, run)
        else:
            run = 0.0
    return {
        "lines": lines,
        "slot_idle_s": round(idle, 1), "slot_idle_longest_s": round(longest, 1),
        "rolling_at_once_max": at_once(rollouts),
        "rolling_at_once_max_incl_draining": at_once(draining),
        "rolling_at_once_max_operator_view": at_once(operator_view),
        "all_ready_after_s": None if all_settled_at is None else round(all_settled_at - t_up, 1),
        "redis_pods_replaced": len(redis_pods_before - redis_now),
    }


def webhook_figures(stream: Stream, turns: list[dict[str, Any]]) -> dict[str, Any]:
    answered: dict[str, int] = {}
    unanswered = 0
    for t in turns:
        if t["msg"] not in stream.messages:
            continue
        if t.get("answered"):
            answered[t["msg"]] = answered.get(t["msg"], 0) + 1
        else:
            unanswered += 1
    lost = sorted(m for m in stream.messages if not answered.get(m))
    twice = sorted(m for m, n in answered.items() if n > 1)
    unconfirmed = sorted(m for m, copies in stream.confirmed.items() if copies != {"edge", "pod"})
    failed = [d for d in stream.deliveries if not d.ok]
    return {
        "messages": len(stream.messages), "deliveries": len(stream.deliveries),
        "deliveries_retried": len(failed), "lost": len(lost), "duplicated": len(twice),
        "turns_unanswered": unanswered, "unconfirmed": len(unconfirmed),
        "deduplicated_answers": sum(d.deduplicated for d in stream.deliveries),
        "lost_messages": lost[:20], "duplicated_messages": twice[:20], "unconfirmed_messages": unconfirmed[:20],
        "failures_by_error": _count(f"{d.copy}: {d.status or d.error.split(':')[0]}" for d in failed),
    }


def _count(items: Iterator[str] | Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        out[item] = out.get(item, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


# -- the run ---------------------------------------------------------------------------------

@dataclass
class Run:
    gateways: list[Gateway]
    figures: dict[str, Any]
    analysis: dict[str, Any]
    final: dict[str, dict[str, Any]]        # each GatewayDeployment as read at the end
    final_deployments: dict[str, dict[str, Any]]
    final_config_maps: dict[str, dict[str, Any]]
    final_pods: dict[str, list[dict[str, Any]]]


def install_earlier(cluster: Cluster, release: earlier.Release, namespaces: list[str]) -> None:
    cluster.apply(json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": node.SYSTEM_NAMESPACE, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}))
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(release.chart / "crds"))
    repository, tag = release.image.rsplit(":", 1)
    cluster.helm("install", node.RELEASE, str(release.chart), "-n", node.SYSTEM_NAMESPACE, "--wait",
                 "--timeout", "240s", "--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
                 "--set", "image.pullPolicy=Never", "--set", f"managedRedis.image={node.images().redis}",
                 "--set", f"tests.image={release.image}", "--set", "watchNamespaces={" + ",".join(namespaces) + "}")


def route_accepted(cluster: Cluster, gw: Gateway) -> bool:
    route = cluster.get_json("httproute", gw.name, "-n", gw.namespace)
    return any({c["type"]: c["status"] for c in parent.get("conditions") or []}.get("Accepted") == "True"
               for parent in (route.get("status") or {}).get("parents") or [])


def operator_images(cluster: Cluster) -> set[str]:
    return {p["spec"]["containers"][0]["image"]
            for p in cluster.get_json("pods", "-n", node.SYSTEM_NAMESPACE)["items"]
            if not p["metadata"].get("deletionTimestamp")}


#: a status written just before the Deployment's last change can arrive after it on another watch
ORDERING_S = 2.0


def said_done_early(g: dict[str, Any]) -> list[list[Any]]:
    """The Reconciling=False (ReconcileComplete) a GatewayDeployment said while its upgrade was not done:
    after it was first queued (or its rollout started) and before its Deployment controller finished."""
    since = g["queued_s"] if g["queued_s"] is not None else g["rollout_start_s"]
    until_s = g["rollout_end_s"]
    if since is None or until_s is None:
        return []
    return [step for step in g["transitions"].get("Reconciling", [])
            if step[1] == "False" and since < step[0] < until_s - ORDERING_S]


def figures_table(figures: dict[str, Any]) -> str:
    rows = [f"upgrade {figures['from'][:12]} -> this tree: {figures['gatewaydeployments']} GatewayDeployments "
            f"({figures['replicas_mix']}), cap {figures['cap']}"]
    for key in ("rolling_at_once_max", "rolling_at_once_max_operator_view", "rolling_at_once_max_incl_draining",
                "completed", "queued", "slot_idle_s", "slot_idle_longest_s",
                "reconciling_false_while_queued_or_rolling", "helm_upgrade_s", "all_ready_after_s", "messages",
                "deliveries", "deliveries_retried", "lost", "duplicated", "turns_unanswered", "lt_flaps", "ready_false_multi_replica",
                "redis_pods_replaced", "watch_caught_up", "earlier_image_build_s", "run_s"):
        rows.append(f"  {key:38} {figures.get(key)}")
    for key, g in figures["per_gateway"].items():
        rows.append(f"  {key:24} {g['replicas']}x {g['store']:6} queued {g['queued_s']!s:>6} s  rolled "
                    f"{g['rollout_start_s']!s:>6} -> {g['rollout_end_s']!s:>6} s  Ready: {g['ready']}")
    return "\n".join(rows)


@pytest.fixture(scope="module")
def upgrade(cluster: Cluster, operators: dict[Path, Any]) -> Iterator[Run]:
    if cluster.directory is None:
        pytest.skip("the upgrade test imports the earlier release's image into the session's own node "
                    "(not an existing cluster's, GWOP_TEST_KUBECONFIG)")
    began = time.monotonic()
    node.stop_the_session_operator(cluster, operators)
    built = time.monotonic()
    release = earlier.build(EARLIER)
    earlier.import_to_node(cluster, release)
    build_s = round(time.monotonic() - built, 1)
    ns = {"a": cluster.new_namespace({"pod-security.kubernetes.io/enforce": "restricted"}),
          "b": cluster.new_namespace({"pod-security.kubernetes.io/enforce": "restricted"})}
    gateways = [Gateway(ns[n], name, replicas) for n, name, replicas in GATEWAYS]
    watches: Watches | None = None
    stream: Stream | None = None
    try:
        cluster.helm("uninstall", node.RELEASE, "-n", node.SYSTEM_NAMESPACE, "--wait", check=False)  # an earlier run's
        install_earlier(cluster, release, list(ns.values()))
        assert operator_images(cluster) == {release.image}
        llm_env = llm_pod.deploy(cluster, ns["a"], node.images().gateway)
        watches = Watches(cluster, set(ns.values()))
        cluster.apply(json.dumps({"apiVersion": "v1", "kind": "List",
                                  "items": [manifest(gw, llm_env) for gw in gateways]}))
        for gw in gateways:
            cluster.kubectl("wait", "-n", gw.namespace, "--for=condition=Ready", f"gatewaydeployment/{gw.name}",
                            "--timeout=300s")
        for gw in gateways:  # the edge took its route (an operator limited to some namespaces cannot read the
            # Gateway in gwop-edge, so status.expose has no address: the route's own status says it)
            until(lambda: route_accepted(cluster, gw), timeout=120, what=f"{gw.key}'s HTTPRoute accepted by the edge")
        tokens = {gw.key: node.gateway_token(cluster, gw.namespace, gw.name) for gw in gateways}
        stream = Stream(gateways, tokens, watches).start()

        def baseline_held() -> bool:  # every replica polled (0.1.16 builds its store on its first webhook)
            for gw in gateways:
                body = cluster.get_json("gatewaydeployment", gw.name, "-n", gw.namespace)
                found = conditions_of(body)
                if found.get("Ready", {}).get("status") != "True" or \
                        found.get("ExactlyOnceAdmission", {}).get("status") != "True":
                    return False
            return all(stream.confirmed[m] == {"edge", "pod"} for m in list(stream.messages)[:len(gateways)])
        until(baseline_held, timeout=180, interval=2, what="every GatewayDeployment Ready with exactly-once held, "
              "under the earlier release, and the stream's first messages answered")
        baseline = {gw.key: template_hash_of(cluster.get_json("deployment", gw.name, "-n", gw.namespace))
                    for gw in gateways}
        assert all(baseline.values()), baseline
        answered_by(stream, len(gateways) * 3)  # the stream runs a while on the earlier release

        t_up = time.time()
        node.install_operator(cluster, "--set", "watchNamespaces={" + ",".join(ns.values()) + "}")
        helm_s = round(time.time() - t_up, 1)
        assert operator_images(cluster) == {node.images().operator}

        def all_done() -> bool:  # the GatewayDeployments as read now (the watch's account is judged later)
            with watches.lock:
                deps = dict(watches.by_kind["deployments"].state)
            gwds = {f"{o['metadata']['namespace']}/{o['metadata']['name']}": o for namespace in ns.values()
                    for o in cluster.get_json("gatewaydeployments", "-n", namespace)["items"]}
            return all(gw.key in deps and template_hash_of(deps[gw.key]) != baseline[gw.key]
                       and deployment_complete(deps[gw.key]) and gw.key in gwds and gwd_settled(gwds[gw.key])
                       for gw in gateways)
        try:
            until(all_done, timeout=UPGRADE_TIMEOUT_S, interval=2,
                  what="every GatewayDeployment rolled to the new template and Ready")
            completed = True
        except WaitTimeout:  # the figures say how far it got; the tests below fail on it
            completed = False
        more = len(stream.messages) + len(gateways) * SETTLED_ROUNDS  # and on, after
        until(lambda: len(stream.messages) >= more, timeout=SETTLED_ROUNDS * PERIOD_S + 30, what=f"{more} messages")
        stream.stop_making()
        pending = stream.drain(timeout=240)
        final = {gw.key: cluster.get_json("gatewaydeployment", gw.name, "-n", gw.namespace) for gw in gateways}
        def seen_by_the_watch() -> bool:  # resourceVersions are etcd revisions: a later write is a larger one
            with watches.lock:
                state = dict(watches.by_kind["gatewaydeployments"].state)
            return all(int(state.get(gw.key, {}).get("metadata", {}).get("resourceVersion") or 0)
                       >= int(final[gw.key]["metadata"]["resourceVersion"]) for gw in gateways)
        try:
            until(seen_by_the_watch, timeout=60, what="the watch to have seen each GatewayDeployment's last status")
            caught_up = True
        except WaitTimeout:
            caught_up = False
        records = watches.snapshot()
        turns = llm_turns(cluster, ns["a"])
        if os.environ.get("GWOP_UPGRADE_RECORDS"):  # everything the figures come from, for a closer look
            with open(os.environ["GWOP_UPGRADE_RECORDS"], "w") as out:
                out.write(json.dumps({"t_up": t_up, "baseline": baseline, "gateways": [gw.__dict__ for gw in gateways],
                                      "turns": turns, "deliveries": [d.__dict__ for d in stream.deliveries],
                                      "messages": {m: gw.key for m, gw in stream.messages.items()}}) + "\n")
                for r in records:
                    out.write(json.dumps({"at": r.at, "kind": r.kind, "type": r.type, "obj": r.obj}) + "\n")
        analysis = analyse(records, gateways, baseline, t_up)
        webhooks = webhook_figures(stream, turns)
        final_deployments = {gw.key: cluster.get_json("deployment", gw.name, "-n", gw.namespace) for gw in gateways}
        final_cms = {gw.key: cluster.get_json("configmap", config_map_name(gw.name), "-n", gw.namespace)
                     for gw in gateways}
        final_pods = {gw.key: [p for p in cluster.get_json("pods", "-n", gw.namespace, "-l",
                                                           f"{api.LABEL_INSTANCE}={gw.name},"
                                                           f"{api.LABEL_COMPONENT}=gateway")["items"]]
                      for gw in gateways}
        lines: dict[str, Timeline] = analysis["lines"]
        per_gateway = {}
        for gw in gateways:
            line = lines[gw.key]
            ready = line.transitions.get("Ready", [])
            per_gateway[gw.key] = {
                "replicas": gw.replicas, "store": gw.store,
                "queued_s": round(line.queued[0] - t_up, 1) if line.queued else None,
                "queued_until_s": round(line.queued[-1] - t_up, 1) if line.queued else None,
                "rollout_start_s": None if line.start is None else round(line.start - t_up, 1),
                "rollout_end_s": None if line.end is None else round(line.end - t_up, 1),
                "old_pods_gone_s": None if line.drained is None else round(line.drained - t_up, 1),
                "ready": " ".join(f"{s}@{at - t_up:.1f}" for at, s, _, _ in ready) or "unchanged",
                "transitions": {t: [[round(at - t_up, 1), s, reason, message] for at, s, reason, message in v]
                                for t, v in line.transitions.items()},
                "flaps": line.flaps,
            }
        figures = {
            "from": release.commit, "cap": CAP, "gatewaydeployments": len(gateways), "completed": completed,
            "replicas_mix": ", ".join(f"{gw.name} {gw.replicas}" for gw in gateways),
            "rolling_at_once_max": analysis["rolling_at_once_max"],
            "rolling_at_once_max_operator_view": analysis["rolling_at_once_max_operator_view"],
            "rolling_at_once_max_incl_draining": analysis["rolling_at_once_max_incl_draining"],
            "queued": sum(bool(lines[gw.key].queued) for gw in gateways),
            "slot_idle_s": analysis["slot_idle_s"], "slot_idle_longest_s": analysis["slot_idle_longest_s"],
            "reconciling_false_while_queued_or_rolling": sum(len(said_done_early(per_gateway[gw.key]))
                                                             for gw in gateways),
            "helm_upgrade_s": helm_s, "all_ready_after_s": analysis["all_ready_after_s"],
            **{k: v for k, v in webhooks.items()}, "deliveries_pending_at_end": pending,
            "lt_flaps": sum(len(lines[gw.key].flaps) for gw in gateways),
            "ready_false_multi_replica": sum(any(step[1] == "False" for step in
                                                 lines[gw.key].transitions.get("Ready", []))
                                             for gw in gateways if gw.replicas > 1),
            "redis_pods_replaced": analysis["redis_pods_replaced"],
            "watch_caught_up": caught_up,
            "watches": {k: {"restarts": w.restarts, "last_error": w.last_error,
                            "last_event_s": round(w.last_event_at - t_up, 1)} for k, w in watches.by_kind.items()},
            "earlier_image_build_s": build_s, "earlier_images_sh_s": release.built_s,
            "run_s": round(time.monotonic() - began, 1),
            "per_gateway": per_gateway,
        }
        print("\n" + figures_table(figures))
        if os.environ.get("GWOP_UPGRADE_JSON"):
            Path(os.environ["GWOP_UPGRADE_JSON"]).write_text(json.dumps(figures, indent=2, default=str) + "\n")
        yield Run(gateways, figures, analysis, final, final_deployments, final_cms, final_pods)
    finally:
        if stream is not None:
            stream.stop()
        if watches is not None:
            watches.stop()
        cluster.helm("uninstall", node.RELEASE, "-n", node.SYSTEM_NAMESPACE, "--wait", "--timeout", "180s", check=False)
        cluster.kubectl("delete", "namespace", node.SYSTEM_NAMESPACE, "--wait=true", "--timeout=120s", check=False)
        for namespace in ns.values():  # as the namespace fixture does: their pods drain on their own
            cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        # this tree's CRD, whatever happened (the earlier release's was applied first)
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"), check=False)


# -- what a user is promised ---------------------------------------------------------------

def test_every_gatewaydeployment_rolled_to_the_new_release_and_is_ready(upgrade: Run) -> None:
    shipped = pod_code()
    for gw in upgrade.gateways:
        body, deployment = upgrade.final[gw.key], upgrade.final_deployments[gw.key]
        config_map = upgrade.final_config_maps[gw.key]
        assert {k: config_map["data"].get(k) for k in shipped} == shipped, \
            f"{gw.key}: the ConfigMap holds another launcher"
        new_hash = config_hash({"data": config_map["data"]})
        assert template_hash_of(deployment) == new_hash, gw.key
        assert api.ANNOTATION_TEMPLATE_HASH in (deployment["metadata"].get("annotations") or {}), gw.key
        pods = [p for p in upgrade.final_pods[gw.key] if not p["metadata"].get("deletionTimestamp")]
        assert len(pods) == gw.replicas and all(pod_hash(p) == new_hash and is_ready(p) for p in pods), \
            (gw.key, [(p["metadata"]["name"], pod_hash(p), is_ready(p)) for p in pods])
        found = conditions_of(body)
        assert body["status"]["observedGeneration"] == body["metadata"]["generation"], gw.key
        assert (found["Ready"]["status"], found["Ready"]["reason"]) == ("True", reasons.AVAILABLE), (gw.key, found)
        assert (found["Reconciling"]["status"], found["Reconciling"]["reason"]) == \
            ("False", reasons.RECONCILE_COMPLETE), (gw.key, found["Reconciling"])
    assert upgrade.figures["watch_caught_up"], upgrade.figures["watches"]  # else the figures miss changes
    assert upgrade.figures["completed"] and upgrade.figures["all_ready_after_s"] is not None, \
        figures_table(upgrade.figures)
    assert upgrade.figures["redis_pods_replaced"] == 0, "the upgrade restarted a managed Redis"


def test_no_more_than_the_cap_roll_at_once_and_the_others_wait_queued(upgrade: Run) -> None:
    f, lines = upgrade.figures, upgrade.analysis["lines"]
    assert all(lines[gw.key].start is not None for gw in upgrade.gateways), "a GatewayDeployment never rolled"
    assert 1 <= f["rolling_at_once_max"] <= CAP, figures_table(f)
    assert f["rolling_at_once_max_operator_view"] <= CAP, figures_table(f)
    # by the order their rollouts started: those after the first CAP waited, saying so, and their
    # pods were left alone meanwhile (the last Queued status is written before the rollout's own)
    order = sorted(upgrade.gateways, key=lambda gw: lines[gw.key].start)
    for gw in order[CAP:]:
        line = lines[gw.key]
        assert line.queued, f"{gw.key} rolled without having been queued:\n{figures_table(f)}"
        assert line.queued[0] < line.start and line.queued[-1] <= line.start + 5, (gw.key, line.queued, line.start)
    assert f["queued"] >= len(upgrade.gateways) - CAP, figures_table(f)


def test_a_queued_or_rolling_gatewaydeployment_says_so_until_its_rollout_is_done(upgrade: Run) -> None:
    """Queued, it says Reconciling=True OperatorUpgradeQueued until its turn, then RollingOut until the
    Deployment controller has finished (every replica of the new template, ready, no old pod left):
    a Reconciling=False ReconcileComplete in between tells kubectl wait, helm --wait and Argo CD that
    it is done while it is not, and frees its slot for the next one too early."""
    t = upgrade.figures["per_gateway"]
    early = {gw.key: {"queued_s": t[gw.key]["queued_s"], "rollout": [t[gw.key]["rollout_start_s"],
                                                                     t[gw.key]["rollout_end_s"]],
                      "said_done": said_done_early(t[gw.key])}
             for gw in upgrade.gateways if said_done_early(t[gw.key])}
    assert not early, json.dumps(early, indent=1)


def test_no_webhook_was_lost_or_ran_twice(upgrade: Run) -> None:
    f = upgrade.figures
    assert f["messages"] >= 10 * len(upgrade.gateways), figures_table(f)
    assert f["deliveries_pending_at_end"] == 0 and f["unconfirmed"] == 0, \
        (f["unconfirmed_messages"], f["failures_by_error"])
    assert (f["lost"], f["duplicated"]) == (0, 0), (f["lost_messages"], f["duplicated_messages"], figures_table(f))


def test_conditions_move_only_when_their_status_flips_and_say_nothing_is_wrong(upgrade: Run) -> None:
    """lastTransitionTime changes only with the status (conditions.merge); an upgrade is no problem
    (never Stalled), exactly-once is never said lost, the Redis stays reachable."""
    lines, t = upgrade.analysis["lines"], upgrade.figures["per_gateway"]
    flaps = {gw.key: lines[gw.key].flaps for gw in upgrade.gateways if lines[gw.key].flaps}
    assert not flaps, json.dumps(flaps, indent=1)
    wrong = []
    for gw in upgrade.gateways:
        seen = t[gw.key]["transitions"]
        bad = {"Stalled": "True", "IdempotencyDegraded": "True", "ExactlyOnceAdmission": "False",
               **({"RedisReachable": "False"} if gw.store == "redis" else {})}
        wrong += [(gw.key, type_, step) for type_, status in bad.items() for step in seen.get(type_, [])
                  if step[1] == status]
    assert not wrong, json.dumps(wrong, indent=1)


def test_ready_goes_false_once_for_its_rollout_and_never_while_queued(upgrade: Run) -> None:
    """Ready is False (ReplicasNotReady) while a rollout runs, as for a spec change, so that
    `kubectl wait --for=condition=Ready` waits for it: once per GatewayDeployment, for its one
    rollout, never flapping. A queued GatewayDeployment's pods serve on untouched, so it stays Ready
    while queued (that each ends Ready is the first test's)."""
    t = upgrade.figures["per_gateway"]
    wrong = []
    for gw in upgrade.gateways:
        ready = t[gw.key]["transitions"].get("Ready", [])
        falses = [step for step in ready if step[1] != "True"]
        queued_until = t[gw.key]["queued_until_s"]
        if len(falses) > 1:
            wrong.append((gw.key, "Ready went False more than once for one rollout", ready))
        if queued_until is not None and any(step[1] != "True" and step[0] <= queued_until for step in ready):
            wrong.append((gw.key, "Ready went False while queued", ready))
    assert not wrong, json.dumps(wrong, indent=1)
