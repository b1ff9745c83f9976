"""The shard and member Leases (core/shards.py's protocol) in the operator's namespace.

One list per tick reads them all (selected by the label ``gateway-operator.dev/shard-group``);
each write is a create, or a replace conditioned on the resourceVersion read, so that of two
replicas writing the same Lease from the same read one is refused (409) and learns nothing
false. Synchronous calls with a timeout: the holder runs them in a thread.
"""
from __future__ import annotations

import datetime
import re
from typing import Any, cast

from kubernetes import client
from kubernetes.client.rest import ApiException

from gateway_operator.core.shards import LeaseView

GROUP_LABEL = "gateway-operator.dev/shard-group"
_SHARD = re.compile(r"-shard-(\d+)$")


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class ShardLeases:
    def __init__(self, api_client: client.ApiClient, namespace: str, group: str,
                 timeout: tuple[float, float] = (2.0, 4.0)) -> None:
        self.api, self.namespace, self.group, self.timeout = client.CoordinationV1Api(api_client), namespace, group, timeout

    def shard_name(self, shard: int) -> str:
        return f"{self.group}-shard-{shard}"

    def member_name(self, identity: str) -> str:
        return f"{self.group}-member-{identity}"

    def read(self) -> list[LeaseView]:
        listed = self.api.list_namespaced_lease(self.namespace, label_selector=f"{GROUP_LABEL}={self.group}",
                                                _request_timeout=self.timeout)
        return [view for lease in listed.items if (view := self._view(lease)) is not None]

    def _view(self, lease: client.V1Lease) -> LeaseView | None:
        meta, spec = lease.metadata, lease.spec
        if meta is None or meta.name is None or meta.resource_version is None:
            return None  # the API server's Leases always name theirs
        name, version = meta.name, meta.resource_version
        shard = _SHARD.search(name)
        if not name.startswith(f"{self.group}-") or (shard is None and not name.startswith(f"{self.group}-member-")):
            return None
        # any write changes the resourceVersion: a renewal within the same microsecond included
        renewed = f"{spec.renew_time.isoformat() if spec and spec.renew_time else ''}@{version}"
        return LeaseView(name, (spec.holder_identity if spec else None) or "", renewed,
                         version, int(shard.group(1)) if shard else None)

    def write(self, name: str, read: LeaseView | None, holder: str, duration: float) -> LeaseView | None:
        """Holder ``holder`` ('' to give it up) with a fresh renewTime: the Lease as written, or
        None when another replica wrote it since ``read`` (or created it first)."""
        now = _now()
        body: dict[str, Any] = {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": self.namespace, "labels": {GROUP_LABEL: self.group}},
            "spec": {"holderIdentity": holder or None, "leaseDurationSeconds": int(round(duration)),
                     "renewTime": now}}
        if holder and (read is None or read.holder != holder):
            body["spec"]["acquireTime"] = now
        # cast: the client sends a dict body as it is (ApiClient.sanitize_for_serialization), though its
        # annotations name only its V1Lease model
        try:
            if read is None:
                written = self.api.create_namespaced_lease(self.namespace, cast(client.V1Lease, body),
                                                           _request_timeout=self.timeout)
            else:
                body["metadata"]["resourceVersion"] = read.version
                written = self.api.replace_namespaced_lease(name, self.namespace, cast(client.V1Lease, body),
                                                            _request_timeout=self.timeout)
        except ApiException as e:
            if e.status == 409:
                return None
            raise
        return self._view(written)

    def delete(self, name: str, read: LeaseView) -> None:
        """Deletes ``name`` if nobody wrote it since ``read`` (a member Lease at shutdown)."""
        try:
            self.api.delete_namespaced_lease(name, self.namespace, _request_timeout=self.timeout,
                                             body=client.V1DeleteOptions(preconditions=client.V1Preconditions(
                                                 resource_version=read.version)))
        except ApiException as e:
            if e.status not in (404, 409):
                raise
