"""The operator's I/O with the API server: server-side apply without needless writes, and
the few reads and writes reconciliation needs. Everything here is synchronous; kopf
handlers call it through ``asyncio.to_thread``.
"""
from __future__ import annotations

import base64
import collections
import contextlib
import contextvars
import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, NamedTuple, Sequence, cast

import urllib3
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError, ResourceNotFoundError
from kubernetes.utils import parse_quantity

from gateway_operator import api
from gateway_operator.api.workloads import controller_uid
from gateway_operator.core.render.autoscaling import POD_MONITOR_API
from gateway_operator.core.render.manifest import Manifest, applied_hash

log = logging.getLogger(__name__)

# every request is bounded: (connect, read) seconds
REQUEST_TIMEOUT = (5.0, 30.0)
# a request the server may have received is never sent again by the client: urllib3 would resend a
# DELETE or PUT whose answer timed out (three times by default), which multiplies each bound (with
# --shards a write must land within the Lease margin) and hides time the loop's backoff owns. A
# refused connection is still retried: nothing was sent.
RETRIES = urllib3.Retry(total=3, read=0)
class NotHeld(Exception):
    """A write of a GatewayDeployment whose shard this replica no longer holds (--shards): not
    sent. The holder could not renew the shard's Lease in time, so the API server's state too."""


#: the GatewayDeployment (uid) whose loop makes the current call: set once in each loop's task
#: (supervisor.py); asyncio.to_thread and loop/threads.run carry it into the thread that sends it
ACTING_FOR: contextvars.ContextVar[str] = contextvars.ContextVar("gwop_acting_for", default="")
#: what the client raises when the API server does not answer in time or at all (urllib3's timeouts,
#: its retries of a refused connection used up, a connection cut; the socket's own): the server's
#: state, not a refusal of what was asked; and a write not sent for a shard no longer held
SILENT = (urllib3.exceptions.TimeoutError, urllib3.exceptions.MaxRetryError, urllib3.exceptions.ProtocolError,
          TimeoutError, ConnectionError, NotHeld)
#: (connect, read) seconds; urllib3's read timeout bounds the wait for each answer's bytes, and the
#: API server sends an answer whole, so it bounds the wait for the answer
Timeout = tuple[float, float]
# optional kinds (apply.OPTIONAL_KINDS) found not served are looked up again only after this long:
# each miss refreshes the whole discovery, and a cluster without prometheus-operator would pay it
# at every full pass of every autoscaled GatewayDeployment
NOT_SERVED_RECHECK_SECONDS = 300.0
_RECHECKED = {POD_MONITOR_API}


class NotOwned(Exception):
    """An object the operator would write exists and is not controlled by this
    GatewayDeployment: it is never adopted, overwritten or deleted."""

    def __init__(self, kind: str, namespace: str, name: str) -> None:
        super().__init__(f"{kind} {namespace}/{name}")
        self.kind, self.namespace, self.name = kind, namespace, name


class NotServed(Exception):
    """The API server serves no such kind (e.g. HTTPRoute without the Gateway API CRDs)."""

    def __init__(self, api_version: str, kind: str) -> None:
        super().__init__(f"{kind} ({api_version})")
        self.api_version, self.kind = api_version, kind


class SecretUndecodable(ValueError):
    """A Secret value that is not UTF-8 text (never quoted: it is a secret)."""


def controlled_by(live: Mapping[str, Any], owner_uid: str) -> bool:
    """True when ``live`` carries a controller ownerReference to ``owner_uid``."""
    return controller_uid(live) == owner_uid


def load_config(kubeconfig: str | None = None) -> client.ApiClient:
    try:
        if kubeconfig:
            config.load_kube_config(kubeconfig)
        else:
            config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    settings = client.Configuration.get_default_copy()
    settings.connection_pool_maxsize = 32  # one connection per API thread (16) and the elector
    settings.retries = RETRIES
    client.Configuration.set_default(settings)
    return client.ApiClient()


def is_subset(desired: Any, live: Any, path: str = "") -> bool:
    """True when every field of ``desired`` has the same value in ``live`` (which carries
    server defaults on top). Lists must match element by element."""
    if isinstance(desired, Mapping):
        return isinstance(live, Mapping) and all(
            k in live and is_subset(v, live[k], f"{path}.{k}") for k, v in desired.items())
    if isinstance(desired, list):
        return isinstance(live, list) and len(desired) == len(live) and all(
            is_subset(d, l, path) for d, l in zip(desired, live))
    if desired == live:
        return True
    if ".resources" in path or path.endswith(".storage"):  # "0.5" and "500m" are one quantity
        try:
            return parse_quantity(desired) == parse_quantity(live)
        except (ValueError, TypeError):
            return False
    return False


@dataclass
class ApplyResult:
    kind: str
    name: str
    written: bool
    live: dict[str, Any] | None  # the object as the API server holds it after the call (status included);
    #                              None: not read, the watch showed it unchanged since it was last verified
    generation: int = 0          # its metadata.generation


class Verified(NamedTuple):
    """An object found to carry a manifest (by its fingerprint) at a resourceVersion."""

    version: int
    fingerprint: str
    generation: int
    keys: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())  # the label and annotation keys the manifest sets
    metadata: int = 0  # metadata_seen(its metadata, keys) as verified


#: kinds whose every spec change bumps metadata.generation, and whose status their controllers
#: move (a Deployment's several times while its pods start, a PodDisruptionBudget's as they turn
#: Ready): a watch event of one at the generation and with the metadata it was verified at moved
#: only its status, so the verification carries over (``status_moved``) and the next pass reads
#: it no more. Other kinds have no generation (a ConfigMap's change is a new resourceVersion only).
STATUS_MOVES = frozenset({"Deployment", "PodDisruptionBudget"})
#: the kinds the operator watches by its own label (loop/handlers.py's owned_object_changed): the
#: watch's silence about one of these names says that no object of ours by that name is there, so
#: its first apply is sent without a read first (``Kube.apply``)
WATCHED_KINDS = frozenset({"Deployment", "ConfigMap", "Service", "PodDisruptionBudget"})
#: the resourceVersion a create-only apply carries: server-side apply takes a resourceVersion in its
#: body as a precondition, and no stored object is at version 1 (etcd's revisions of a running
#: cluster are far past it), so an apply with it creates the object when it is absent and changes
#: nothing when it is there (409 Conflict, then the object is read: ours, or someone else's)
CREATE_ONLY_VERSION = "1"
_KEYS: dict[tuple[tuple[str, ...], tuple[str, ...]], tuple[tuple[str, ...], tuple[str, ...]]] = {}


def metadata_seen(meta: Mapping[str, Any], keys: tuple[tuple[str, ...], tuple[str, ...]]) -> int:
    """What of an object's metadata decides whether it still carries an apply: the values of the
    labels and annotations the manifest sets (``keys``), its owners, and whether it is being deleted.
    Another manager's label or a controller's annotation (a Deployment's revision) is not in it."""
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    return hash((tuple(labels.get(k) for k in keys[0]), tuple(annotations.get(k) for k in keys[1]),
                 json.dumps(meta.get("ownerReferences"), sort_keys=True), meta.get("deletionTimestamp")))


#: (kind, namespace, name) -> the resourceVersion the watch last delivered of it (None: not watched, or gone)
Delivered = Callable[[str, str, str], "int | None"]
#: (kind, namespace, name) -> the uid of the controller of what the watch last delivered (None: none)
Controller = Callable[[str, str, str], "str | None"]


class Kube:
    def __init__(self, api_client: client.ApiClient, delivered: Delivered = lambda *_: None,
                 write_timeout: Timeout = REQUEST_TIMEOUT, controller: Controller = lambda *_: None,
                 secrets_watched: bool = False) -> None:
        self.api_client = api_client
        # with --shards (loop/shard_holder.write_bound): by a GatewayDeployment's uid, asked just
        # before each of its writes is sent, None when this replica may not write for it now, else
        # the write's bound: what is left of its shard's renewal, so that a write in flight when
        # the holder's deadline passes has landed or failed before another replica may take the
        # shard. The holder's loop side may stop a lost shard's loops late on a busy event loop;
        # their writes stop at the deadline.
        self.write_bound: Callable[[str], Timeout | None] = lambda _: write_timeout
        self.delivered = delivered
        # with --watch-secrets: the controller uid of each Secret the watch delivered, and whether
        # Secrets are watched at all (else a Secret the watch never delivered may still be there)
        self.controller, self.secrets_watched = controller, secrets_watched
        # a write of no GatewayDeployment's loop (ACTING_FOR unset): with --shards the bound of
        # a write sent at a renew deadline (core/shards.Timing.write_timeout)
        self.write_timeout = write_timeout
        # by a GatewayDeployment's uid: its writes sent and not yet answered or given up. A shard
        # given up is handed over once its writes in flight have ended (``wait_for_writes``): a
        # write already sent lands before the next holder acts, however long its bound
        self._writing: collections.Counter[str] = collections.Counter()
        self._written = threading.Condition()
        # by owner uid: what each of its objects was last verified to carry. An apply whose object
        # the watch shows unchanged since then reads nothing: a full pass of an idle
        # GatewayDeployment reads back only what no watch covers (issue 22: each read costs
        # about 0.5 ms of CPU in the client, and a resync wave queued them behind each other)
        self._verified: dict[str, dict[tuple[str, str, str], Verified]] = {}
        self._verifying = threading.Lock()  # a pass's thread verifies, the watch's events carry over
        self._not_served: dict[tuple[str, str], float] = {}  # optional kinds found not served, and when
        self.dynamic = DynamicClient(api_client)
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)

    @contextlib.contextmanager
    def _sending(self) -> Iterator[Timeout]:
        """Around a write: its bound (never longer than an unsharded write's), the write counted
        in flight for its GatewayDeployment until it ends; NotHeld, and nothing sent, when its
        shard is not this replica's now. Counted before the shard is asked: a give-up that finds
        none in flight has made every later ask say no."""
        uid = ACTING_FOR.get()
        if not uid:
            yield self.write_timeout
            return
        with self._written:
            self._writing[uid] += 1
        try:
            bound = self.write_bound(uid)
            if bound is None:
                raise NotHeld(uid)
            yield min(bound[0], REQUEST_TIMEOUT[0]), min(bound[1], REQUEST_TIMEOUT[1])
        finally:
            with self._written:
                self._writing[uid] -= 1
                if not self._writing[uid]:
                    del self._writing[uid]
                self._written.notify_all()

    def wait_for_writes(self, given_up: Callable[[str], bool], timeout: float) -> bool:
        """Blocks until no write is in flight for a GatewayDeployment whose uid ``given_up`` names,
        ``timeout`` seconds at most; whether none is."""
        with self._written:
            return self._written.wait_for(lambda: not any(given_up(uid) for uid in self._writing), timeout)

    def _resource(self, manifest: Mapping[str, Any]) -> Any:
        return self._kind(manifest["apiVersion"], manifest["kind"])

    def _kind(self, api_version: str, kind: str) -> Any:
        missed = self._not_served.get((api_version, kind))
        if missed is not None and time.monotonic() - missed < NOT_SERVED_RECHECK_SECONDS:
            raise NotServed(api_version, kind)
        try:  # a miss refreshes the cached discovery once: a kind installed later is found
            return self.dynamic.resources.get(api_version=api_version, kind=kind)
        except ResourceNotFoundError:
            if (api_version, kind) in _RECHECKED:
                self._not_served[(api_version, kind)] = time.monotonic()
            raise NotServed(api_version, kind) from None

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object, or None when it does not exist. Raises NotServed for an unknown kind."""
        resource = self._kind(api_version, kind)
        try:
            # plain JSON: the dynamic client's object wrappers cost more CPU than the request
            response = self.dynamic.request("get", resource.path(name=name, namespace=namespace), serialize=False,
                                            _request_timeout=REQUEST_TIMEOUT)
        except NotFoundError:
            return None
        return json.loads(response.data)

    def apply(self, manifest: Manifest, owner_uid: str) -> ApplyResult:
        """Server-side apply with one field manager, skipped when the live object already
        carries this exact manifest (fingerprint annotation) and nobody drifted it.

        Only objects this GatewayDeployment controls are written: a same-named object of
        someone else raises NotOwned. Conflicts are forced only on our own objects (to put
        drift back); an object created in between by someone else fails with a conflict."""
        desired = _with_fingerprint(manifest)
        meta = manifest["metadata"]
        key = (manifest["kind"], meta["namespace"], meta["name"])
        fingerprint = desired["metadata"]["annotations"][api.ANNOTATION_APPLIED_HASH]
        known = self._verified.get(owner_uid, {}).get(key)
        if known is not None and known.fingerprint == fingerprint and known.version == self.delivered(*key):
            return ApplyResult(manifest["kind"], meta["name"], written=False, live=None, generation=known.generation)
        if known is None and key[0] in WATCHED_KINDS and self.delivered(*key) is None:
            # the watch shows none of ours by this name, and none was verified here (one this loop
            # applied may not be delivered yet): create it, without reading first
            created = self._send_apply(owner_uid, key, manifest, desired, create_only=True)
            if created is not None:
                return created
        live = self.get(manifest["apiVersion"], manifest["kind"], meta["namespace"], meta["name"])
        if live is not None and not controlled_by(live, owner_uid):
            raise NotOwned(manifest["kind"], meta["namespace"], meta["name"])
        if live is not None and is_subset(desired, live):
            return self._verify(owner_uid, key, desired, live, written=False)
        result = self._send_apply(owner_uid, key, manifest, desired, force=live is not None)
        assert result is not None
        return result

    def _send_apply(self, owner_uid: str, key: tuple[str, str, str], manifest: Manifest, desired: Manifest,
                    force: bool = False, create_only: bool = False) -> ApplyResult | None:
        """One server-side apply. ``create_only``: carrying CREATE_ONLY_VERSION, so that it creates
        the object or changes nothing (None: it is there, whoever's it is)."""
        meta = manifest["metadata"]
        if create_only:
            desired = {**desired, "metadata": {**desired["metadata"], "resourceVersion": CREATE_ONLY_VERSION}}
        resource = self._resource(manifest)
        # the apply body is YAML to the API server, whose decoder refuses the JSON surrogate
        # escapes json.dumps writes for characters outside the BMP (an emoji in an annotation):
        # send UTF-8 as it is
        try:
            with self._sending() as bound:
                response = self.dynamic.request(
                    "patch", resource.path(name=meta["name"], namespace=meta["namespace"]),
                    body=json.dumps(desired, ensure_ascii=False).encode(),
                    content_type="application/apply-patch+yaml", field_manager=api.FIELD_MANAGER,
                    force_conflicts=force, serialize=False, _request_timeout=bound)
        except ApiException as e:
            if create_only and e.status == 409:
                return None
            raise
        log.info("applied %s %s/%s", manifest["kind"], meta["namespace"], meta["name"])
        return self._verify(owner_uid, key, desired, json.loads(response.data), written=True)

    def _verify(self, owner_uid: str, key: tuple[str, str, str], desired: Mapping[str, Any], live: dict[str, Any],
                written: bool) -> ApplyResult:
        meta, wanted = live.get("metadata") or {}, desired["metadata"]
        generation = int(meta.get("generation") or 0)
        keys = (tuple(sorted(wanted.get("labels") or ())), tuple(sorted(wanted.get("annotations") or ())))
        keys = _KEYS.setdefault(keys, keys)  # one tuple per manifest shape, however many objects
        with self._verifying:
            try:
                self._verified.setdefault(owner_uid, {})[key] = Verified(
                    int(meta["resourceVersion"]), wanted["annotations"][api.ANNOTATION_APPLIED_HASH], generation,
                    keys, metadata_seen(meta, keys))
            except (KeyError, TypeError, ValueError):  # resource versions are opaque: none to compare
                self._verified.get(owner_uid, {}).pop(key, None)
        return ApplyResult(key[0], key[2], written=written, live=live, generation=generation)

    def status_moved(self, body: Mapping[str, Any]) -> None:
        """A watch event of an owned object (a kind of STATUS_MOVES): when it is at the generation
        and carries the metadata it was verified at for its controller, only its status moved, and
        the verification carries over to its resourceVersion. Called before the event's version is
        recorded as delivered (a pass in between reads the object once more, as before)."""
        meta = body.get("metadata") or {}
        key = (body.get("kind", ""), meta.get("namespace") or "", meta.get("name") or "")
        owner_uid = controller_uid(body)
        if key[0] not in STATUS_MOVES or owner_uid is None:
            return
        try:
            version, generation = int(meta["resourceVersion"]), int(meta["generation"])
        except (KeyError, TypeError, ValueError):
            return
        with self._verifying:
            known = self._verified.get(owner_uid, {}).get(key)
            if known is not None and version > known.version and generation == known.generation and \
                    metadata_seen(meta, known.keys) == known.metadata:
                self._verified[owner_uid][key] = known._replace(version=version)

    def unchanged(self, owner_uid: str, objects: Sequence[tuple[str, str, str]],
                  absent: Sequence[tuple[str, str, str]] = ()) -> bool:
        """Does the watch show every one of ``objects`` (kind, namespace, name) at the version it was
        last verified at for this owner, and none of ``absent``? An object no watch covers never is."""
        verified = self._verified.get(owner_uid, {})
        return all((v := verified.get(key)) is not None and v.version == self.delivered(*key) for key in objects) \
            and all(self.delivered(*key) is None for key in absent)

    def forget(self, owner_uid: str) -> None:
        """A GatewayDeployment's loop ended: what its objects were verified to carry goes."""
        self._verified.pop(owner_uid, None)

    def create_if_absent(self, manifest: Manifest, owner_uid: str) -> tuple[bool, dict[str, Any] | None]:
        """For generated Secrets: created once, never overwritten (a new token would lock
        every client out). A same-named Secret of someone else raises NotOwned. Returns whether
        this call created it, and the Secret as read or as the create answered it, so that the pass
        reads it no more (None when another create won in between, or when the Secret watch
        (--watch-secrets) shows it there and ours: then nothing is read)."""
        meta = manifest["metadata"]
        key = (manifest["kind"], meta["namespace"], meta["name"])
        if self.secrets_watched and key[0] == "Secret":
            if self.delivered(*key) is not None:  # there, as the watch shows it: nothing is read
                if self.controller(*key) != owner_uid:
                    raise NotOwned(*key)
                return False, None
            made = self._create(manifest)   # none shown: create it (one the watch is late with answers 409)
            if made is not None:
                return True, made
        live = self.get(manifest["apiVersion"], manifest["kind"], meta["namespace"], meta["name"])
        if live is not None:  # a read, so that an idle reconcile sends no write at all
            if not controlled_by(live, owner_uid):
                raise NotOwned(manifest["kind"], meta["namespace"], meta["name"])
            return False, live
        made = self._create(manifest)
        return made is not None, made

    def _create(self, manifest: Manifest) -> dict[str, Any] | None:
        """POST: the object as created, or None when one by its name is there (409)."""
        resource = self._resource(manifest)
        try:
            with self._sending() as bound:
                response = self.dynamic.request("post", resource.path(namespace=manifest["metadata"]["namespace"]),
                                                body=manifest, serialize=False, _request_timeout=bound)
            return cast(dict[str, Any], json.loads(response.data))
        except ApiException as e:
            if e.status == 409:
                return None
            raise

    def delete_if_present(self, api_version: str, kind: str, namespace: str, name: str,
                          owner_uid: str) -> bool:
        """Remove an object the operator no longer renders (only when it owns it)."""
        live = self.get(api_version, kind, namespace, name)
        if live is None or not controlled_by(live, owner_uid):
            return False
        resource = self._kind(api_version, kind)
        with self._sending() as bound:
            resource.delete(name=name, namespace=namespace, _request_timeout=bound)
        return True

    def secret_value(self, namespace: str, name: str, key: str,
                     read: Mapping[str, Any] | None = None) -> tuple[str | None, str]:
        """The decoded value (None when the Secret exists but lacks the key) and the Secret's
        resourceVersion (``read``: the Secret as this pass already read it). Raises LookupError
        when the Secret does not exist and SecretUndecodable when the value is not UTF-8."""
        secret = read if read is not None else self.get("v1", "Secret", namespace, name)
        if secret is None:
            raise LookupError(name)
        data = secret.get("data") or {}
        version = str(secret["metadata"].get("resourceVersion"))
        if key not in data:
            return None, version
        try:
            return base64.b64decode(data[key]).decode(), version
        except (UnicodeDecodeError, ValueError):
            raise SecretUndecodable(name) from None

    def resource_versions(self, api_version: str, kind: str, namespaces: Sequence[str] = (),
                          selector: str = "") -> dict[tuple[str, str], int]:
        """Every object's resourceVersion, by (namespace, name), from a metadata-only list (across
        all namespaces, or in each of ``namespaces``): what the watch liveness check compares."""
        resource = self._kind(api_version, kind)
        found: dict[tuple[str, str], int] = {}
        for namespace in namespaces or (None,):
            response = self.dynamic.request(
                "get", resource.path(namespace=namespace), label_selector=selector or None, serialize=False,
                header_params={"Accept": "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"},
                _request_timeout=REQUEST_TIMEOUT)
            for item in json.loads(response.data).get("items") or []:
                meta = item.get("metadata") or {}
                try:
                    found[(meta.get("namespace") or "", meta["name"])] = int(meta["resourceVersion"])
                except (KeyError, TypeError, ValueError):
                    continue
        return found

    def gateway_deployments(self, namespaces: Sequence[str] = (), shard_selector: str = "",
                            page: int = 500) -> list[dict[str, Any]]:
        """Every GatewayDeployment (across all namespaces, or in each of ``namespaces``), a page at
        a time, asking the API server for ``shard_selector``'s only (KEP-5866's shardSelector). A
        server without ShardedListAndWatch ignores it and answers all, and a custom resource's list
        says nothing either way (in 1.37 only built-in lists carry ``metadata.shardInfo``): the
        caller filters the same assignment again."""
        resource = self._kind(f"{api.GROUP}/{api.VERSION}", api.KIND)
        items: list[dict[str, Any]] = []
        for namespace in namespaces or (None,):
            token = None
            while True:
                query = [("shardSelector", shard_selector)] if shard_selector else []
                response = self.dynamic.request("get", resource.path(namespace=namespace), limit=page,
                                                _continue=token, query_params=query, serialize=False,
                                                _request_timeout=REQUEST_TIMEOUT)
                listed = json.loads(response.data)
                items.extend(listed.get("items") or [])
                token = (listed.get("metadata") or {}).get("continue")
                if not token:
                    break
        return items

    def patch_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> dict[str, Any]:
        with self._sending() as bound:
            # cast: the client answers a custom object as its JSON, a dict, annotated ``object``
            return cast(dict[str, Any], self.custom.patch_namespaced_custom_object_status(
                api.GROUP, api.VERSION, namespace, api.PLURAL, name, {"status": status},
                _request_timeout=bound))

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        with self._sending() as bound:
            self.core.delete_namespaced_pod(
                name, namespace, body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid)),
                _request_timeout=bound)

    def set_pod_condition(self, namespace: str, name: str, uid: str, condition: Mapping[str, str]) -> None:
        """One condition of a pod's status (merged by type), on that pod only (its uid)."""
        with self._sending() as bound:
            self.core.patch_namespaced_pod_status(
                name, namespace, {"metadata": {"uid": uid}, "status": {"conditions": [dict(condition)]}},
                _content_type="application/strategic-merge-patch+json", _request_timeout=bound)

    def pods(self, namespace: str, selector: Mapping[str, str]) -> list[dict[str, Any]]:
        label_selector = ",".join(f"{k}={v}" for k, v in selector.items())
        items = self.core.list_namespaced_pod(namespace, label_selector=label_selector,
                                              _request_timeout=REQUEST_TIMEOUT).items
        return [self.api_client.sanitize_for_serialization(p) for p in items]


def _with_fingerprint(manifest: Manifest) -> Manifest:
    fingerprint = applied_hash(manifest)
    meta = dict(manifest["metadata"])
    meta["annotations"] = {**(meta.get("annotations") or {}), api.ANNOTATION_APPLIED_HASH: fingerprint}
    return {**manifest, "metadata": meta}
