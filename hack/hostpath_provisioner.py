#!/usr/bin/env python3
"""OUR MINIMAL hostPath PROVISIONER for the local real node (hack/node.sh starts it; not for
production, and not the upstream local-path-provisioner): a PersistentVolumeClaim of the
StorageClass ``gwop-hostpath`` (the node's default class) gets a PersistentVolume whose
hostPath is a fresh directory under ``--root`` on the one node, pre-bound to the claim; when
the claim is deleted the volume is Released, and its directory and the PV are removed
(reclaimPolicy Delete). Dynamic provisioning the way the external-provisioner library does it,
reduced to what one node needs: directories survive pod restarts, not the node's teardown.
"""
from __future__ import annotations

import argparse
import logging
import shutil
import time
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.rest import ApiException

STORAGE_CLASS = "gwop-hostpath"
PROVISIONER = "gateway-operator.dev/node-hostpath"
TIMEOUT = 10  # every API call: a slow apiserver delays provisioning, never hangs it
log = logging.getLogger("hostpath-provisioner")


def volume_for(claim: Any, root: Path, node: str) -> dict[str, Any]:
    """The PV for a pending claim: its size and access modes, pre-bound by claimRef."""
    meta, spec = claim.metadata, claim.spec
    path = root / f"{meta.namespace}-{meta.name}-{meta.uid}"
    return {
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": f"pvc-{meta.uid}", "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER}},
        "spec": {
            "capacity": {"storage": spec.resources.requests["storage"]},
            "accessModes": spec.access_modes,
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": STORAGE_CLASS,
            "volumeMode": spec.volume_mode or "Filesystem",
            "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": meta.namespace,
                         "name": meta.name, "uid": meta.uid},
            "hostPath": {"path": str(path), "type": "DirectoryOrCreate"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}},
        },
    }


def provision(core: client.CoreV1Api, root: Path, node: str) -> None:
    for claim in core.list_persistent_volume_claim_for_all_namespaces(_request_timeout=TIMEOUT).items:
        if claim.spec.storage_class_name != STORAGE_CLASS or claim.spec.volume_name or claim.status.phase != "Pending":
            continue
        if claim.metadata.deletion_timestamp:
            continue
        volume = volume_for(claim, root, node)
        path = Path(volume["spec"]["hostPath"]["path"])
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o777)  # any pod user may write (hostPath gets no fsGroup), as local-path does
        try:
            core.create_persistent_volume(volume, _request_timeout=TIMEOUT)
            log.info("provisioned %s for %s/%s at %s", volume["metadata"]["name"],
                     claim.metadata.namespace, claim.metadata.name, path)
        except ApiException as e:
            if e.status != 409:  # 409: created on an earlier pass, not bound yet
                raise


def reclaim(core: client.CoreV1Api, root: Path) -> None:
    for volume in core.list_persistent_volume(_request_timeout=TIMEOUT).items:
        if (volume.metadata.annotations or {}).get("pv.kubernetes.io/provisioned-by") != PROVISIONER:
            continue
        if volume.status.phase != "Released":
            continue
        path = Path(volume.spec.host_path.path)
        if path.parent == root:  # never a path this provisioner did not make
            shutil.rmtree(path, ignore_errors=True)
        try:
            core.delete_persistent_volume(volume.metadata.name, _request_timeout=TIMEOUT)
            log.info("deleted %s and %s", volume.metadata.name, path)
        except ApiException as e:
            if e.status != 404:
                raise


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--root", required=True, type=Path, help="directory the volumes are made in")
    parser.add_argument("--node", required=True, help="the node the volumes are on")
    parser.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    config.load_kube_config(args.kubeconfig)
    core = client.CoreV1Api()
    args.root.mkdir(parents=True, exist_ok=True)
    root = args.root.resolve()
    while True:
        try:
            provision(core, root, args.node)
            reclaim(core, root)
        except Exception as e:  # noqa: BLE001 - a failed pass is retried on the next one
            log.warning("pass failed: %s", e)
        time.sleep(args.interval)


if __name__ == "__main__":
    main()
