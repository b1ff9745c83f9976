"""An EARLIER release of the operator, taken from git history, for the upgrade test on the real node
(tests/node/test_upgrade.py): that commit's tree (``git archive``: the worktree and its git state
are never touched), its chart (``charts/gateway-operator`` of that tree) and its operator image,
built by that tree's own ``hack/images.sh``.

The build runs in a cache of its own, ``$GWOP_CACHE/earlier/<commit>`` (images.sh's ``GWOP_CACHE``),
seeded with hard links to the current cache's archives: images.sh names every archive by a hash of
its inputs, so what that tree builds the same way (the Debian base, the gateway, Redis, pause) is
reused, and only what differs (its operator) is built, once; the current cache's images.txt and
archives are never written. The operator image then gets a tag of its own
(``operator:earlier-<commit>``: the commit's version may be the current one's, and the node's
containerd must hold both images at once), written into a copy of the archive's OCI index, and
is imported into the running node with ``hack/node.sh images`` (``GWOP_IMAGES_LIST``: that image
and the pause image it needs listed, nothing else).
"""
from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path
from typing import NamedTuple

from . import node
from .cluster import REPO, Cluster

REF_ANNOTATIONS = ("org.opencontainers.image.ref.name", "io.containerd.image.name")


class Release(NamedTuple):
    commit: str       # the full commit
    tree: Path        # its files (git archive)
    chart: Path       # its charts/gateway-operator
    image: str        # its operator image, under a tag of its own
    archive: Path     # that image's OCI archive
    built_s: float    # seconds the tree's images.sh took (a reused build: a few)


def resolve(commit: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify", f"{commit}^{{commit}}"], check=True,
                          capture_output=True, text=True).stdout.strip()


def export(commit: str, into: Path) -> Path:
    """The tree of ``commit`` in ``into`` (written once: a commit's tree never changes)."""
    done = into / ".exported"
    if not done.exists():
        shutil.rmtree(into, ignore_errors=True)
        into.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", commit], check=True,
                                 capture_output=True).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(into, filter="tar")
        done.write_text(commit + "\n")
    return into


def _seed(images: Path) -> None:
    """Hard links to the current cache's archives, so that the tree's images.sh reuses every image
    whose inputs it shares (it removes, in its own cache, the links it did not list)."""
    images.mkdir(parents=True, exist_ok=True)
    for source in (node.CACHE / "images").glob("*"):
        if not source.is_file() or not source.name.endswith((".oci.tar", ".packages.txt")):
            continue
        target = images / source.name
        if target.exists():
            continue
        try:
            os.link(source, target)
        except OSError:
            shutil.copy2(source, target)


def retag(archive: Path, name: str, new_name: str, out: Path) -> Path:
    """A copy of the OCI archive ``archive`` whose index names its image ``new_name`` (instead of
    ``name``): what ctr's import registers it as."""
    if out.exists():
        return out
    part = out.with_name(out.name + ".part")
    renamed = 0
    with tarfile.open(archive) as source, tarfile.open(part, "w") as target:
        for member in source:
            data = source.extractfile(member) if member.isfile() else None
            if member.name.lstrip("./") == "index.json" and data is not None:
                index = json.loads(data.read())
                for manifest in index.get("manifests") or []:
                    annotations = manifest.get("annotations") or {}
                    for key in REF_ANNOTATIONS:
                        if annotations.get(key) == name:
                            annotations[key] = new_name
                            renamed += 1
                body = json.dumps(index).encode()
                member.size = len(body)
                target.addfile(member, io.BytesIO(body))
            else:
                target.addfile(member, data)
    if not renamed:
        part.unlink()
        raise AssertionError(f"{archive}'s index.json does not name {name} ({REF_ANNOTATIONS})")
    part.rename(out)
    return out


def build(commit: str) -> Release:
    """That commit's chart and operator image (built by its own hack/images.sh, reused when built before)."""
    full = resolve(commit)
    root = node.CACHE / "earlier" / full[:12]
    tree = export(full, root / "tree")
    _seed(root / "images")
    log = root / "images.log"
    started = time.monotonic()
    with open(log, "w") as out:
        done = subprocess.run([str(tree / "hack/images.sh")], env=dict(os.environ, GWOP_CACHE=str(root)), cwd=tree,
                              stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise AssertionError(f"{full[:12]}'s hack/images.sh failed ({done.returncode}):\n"
                             + "\n".join(log.read_text(errors="replace").splitlines()[-40:]))
    built_s = time.monotonic() - started
    listed = dict(line.split(maxsplit=1) for line in (root / "images/images.txt").read_text().splitlines()
                  if line.strip())
    name, archive = next((n, Path(a.strip())) for n, a in listed.items()
                         if n.rsplit("/", 1)[-1].startswith("operator:"))
    image = f"{name.rsplit(':', 1)[0]}:earlier-{full[:12]}"
    tagged = retag(archive, name, image, root / f"operator-earlier-{archive.name}")
    for stale in root.glob("operator-earlier-*.oci.tar"):  # an archive of an earlier build of this tree's image
        if stale != tagged:
            stale.unlink()
    return Release(full, tree, tree / "charts/gateway-operator", image, tagged, round(built_s, 1))


def import_to_node(cluster: Cluster, release: Release) -> None:
    """The release's operator image into the running node's containerd (``hack/node.sh images`` with a
    list of its own: that image, and the pause image every list must name)."""
    if cluster.directory is None:
        raise AssertionError("the earlier image can only be imported into the session's own node")
    pause = next(line for line in node.IMAGES_LIST.read_text().splitlines() if line.split()[0].endswith("/pause:3"))
    listed = release.archive.with_suffix(".images.txt")
    listed.write_text(f"{pause}\n{release.image} {release.archive}\n")
    env = dict(os.environ, GWOP_CLUSTER_DIR=str(cluster.directory), GWOP_IMAGES_LIST=str(listed))
    done = subprocess.run([str(REPO / "hack/node.sh"), "images"], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise AssertionError(f"hack/node.sh images ({listed}) failed:\n{done.stdout}\n{done.stderr}")
