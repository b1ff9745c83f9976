"""The shape every rendered object shares (its metadata: labels and the owner reference) and the
fingerprints of what is rendered (the pod-template and applied hashes)."""
from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping

from gateway_operator import api
from gateway_operator.core.render.names import Owner

Manifest = dict[str, Any]


def owned_object(api_version: str, kind: str, name: str, owner: Owner, component: str = "gateway",
                 **body: Any) -> Manifest:
    """An object of ``owner``'s: its name and namespace, the gateway's labels for ``component``,
    and the controller reference by which the garbage collector deletes it with its owner."""
    return {
        "apiVersion": api_version, "kind": kind,
        "metadata": {"name": name, "namespace": owner.namespace,
                     "labels": api.labels_for(owner.name, component),
                     "ownerReferences": [owner.reference()]},
        **body,
    }


def digest(value: Mapping[str, Any] | list[Any]) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def applied_hash(manifest: Manifest) -> str:
    """Fingerprint of what the operator applies, stored on the object so that a field the
    operator stops rendering is removed (a subset check alone would never notice)."""
    return digest(manifest)
