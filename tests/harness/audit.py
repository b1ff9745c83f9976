"""The local control plane's audit log (the policy is in hack/cluster.sh): every write by
anyone, and every request (reads too) by the operator's test identities, metadata only."""
from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .cluster import Cluster

WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})


@dataclass(frozen=True)
class Request:
    verb: str
    group: str         # "" for the core group
    resource: str      # "pods", "gatewaydeployments/status"; "" for a non-resource URL
    namespace: str
    name: str
    code: int          # the response's HTTP status (0 when the entry carries none)
    message: str       # the API server's, for a failure
    causes: tuple[str, ...]  # the reasons of a refusal, e.g. NamespaceTerminating
    stage: str
    time: str          # stageTimestamp, RFC 3339 (compares as a string)
    user_agent: str = ""   # the client's; the operator's names its shard identity (--shards)

    @property
    def created(self) -> bool:
        """A server-side apply (PATCH) that created the object answers 201."""
        return self.code == 201

    @property
    def denied(self) -> bool:
        """Refused for want of a permission (a namespace being deleted refuses new objects
        with 403 too: that is no permission problem)."""
        return self.code == 403 and "NamespaceTerminating" not in self.causes


def now() -> str:
    """The current time in the log's own format, for ``since``."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _files(cluster: Cluster) -> list[Path]:
    """The log's files, oldest first: the API server rotates it at --audit-log-maxsize into
    audit-<time>.log (one backup kept), so that a window spanning a rotation misses nothing."""
    if cluster.audit_log is None:
        raise RuntimeError("the audit log exists only on the local control plane the session started")
    return [f for f in sorted(cluster.audit_log.parent.glob("audit-*.log")) + [cluster.audit_log] if f.exists()]


def requests(cluster: Cluster, user: str, since: str = "") -> list[Request]:
    """The requests of ``user`` the audit log holds from ``since`` on (its stages
    ResponseStarted, for watches, and ResponseComplete)."""
    out = []
    for line in (line for f in _files(cluster) for line in f.read_text().splitlines()):
        if user not in line:  # cheap: most lines are someone else's
            continue
        event: dict[str, Any] = json.loads(line)
        if event["user"]["username"] != user or event["stageTimestamp"] < since:
            continue
        ref = event.get("objectRef") or {}
        resource = ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        status = event.get("responseStatus") or {}
        causes = tuple(c.get("reason", "") for c in (status.get("details") or {}).get("causes") or [])
        out.append(Request(event["verb"], ref.get("apiGroup", ""), resource, ref.get("namespace", ""),
                           ref.get("name", ""), int(status.get("code") or 0), status.get("message", ""), causes,
                           event["stage"], event["stageTimestamp"], event.get("userAgent", "")))
    return out


def holds_since(cluster: Cluster, since: str) -> bool:
    """Does the log still hold everything from ``since`` on (the rotations have dropped none of it)?"""
    for f in _files(cluster):
        with f.open() as lines:
            first = lines.readline()
        if first:
            return json.loads(first)["stageTimestamp"] <= since
    return True


def writes(cluster: Cluster, user: str, since: str = "") -> list[Request]:
    """The completed writes of ``user`` from ``since`` on."""
    return completed(requests(cluster, user, since), WRITE_VERBS)


def completed(found: list[Request], verbs: frozenset[str] | set[str]) -> list[Request]:
    """Those of ``found`` with one of ``verbs`` that completed."""
    return [r for r in found if r.verb in verbs and r.stage == "ResponseComplete"]
