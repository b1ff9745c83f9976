"""The node's images (issue 8): built (or reused) by hack/images.sh, then checked as a user of them
would notice. Part of `make test` (root: buildah, mmdebstrap, mount namespaces; without root the
module skips in one line, under CI it fails, as tests/node/test_node.py does).

No Docker here: each archive is imported with `buildah from oci-archive:...` into hack/images.sh's
own store, its rootfs mounted (`buildah mount`) and run the way a runtime would - the image's own
Env, User and WorkingDir, in a new PID namespace (so tini is PID 1), with the root filesystem
read-only where the operator's pods set readOnlyRootFilesystem."""
from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import tarfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Callable, TypeVar

import pytest

from harness.cluster import REPO
from harness.node import unavailable
from harness.processes import free_port
from harness.wait import stays, until

T = TypeVar("T")

CACHE = Path(os.environ.get("GWOP_CACHE") or Path.home() / ".cache/gateway-operator")
STORE = CACHE / "images/storage"
PREFIX = "localhost/gateway-operator"


def buildah(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["buildah", "--root", str(STORE / "root"), "--runroot", str(STORE / "run"), *args],
                          check=True, capture_output=True, text=True, **kw)


@pytest.fixture(scope="module")
def images() -> dict[str, Path]:
    if os.geteuid() != 0:
        unavailable("building and running the images needs root (buildah, mmdebstrap, namespaces)")
    started = time.monotonic()
    subprocess.run([str(REPO / "hack/images.sh")], check=True, timeout=1800)
    print(f"hack/images.sh took {time.monotonic() - started:.1f}s")
    listed = (CACHE / "images/images.txt").read_text().split("\n")
    return {name: Path(archive) for name, archive in (line.split(" ", 1) for line in listed if line)}


def image(images: dict[str, Path], short: str) -> tuple[str, Path]:
    [(name, archive)] = [(n, a) for n, a in images.items() if n.startswith(f"{PREFIX}/{short}:")]
    return name, archive


class Rootfs:
    """An image unpacked by buildah, run like a container: `run` and `start` take argv."""

    def __init__(self, archive: Path) -> None:
        self.container = f"gwop-test-{uuid.uuid4().hex[:8]}"
        buildah("from", "--quiet", "--name", self.container, f"oci-archive:{archive}")
        self.mnt = buildah("mount", self.container).stdout.strip()
        self.config = json.loads(buildah("inspect", "--type", "container", self.container).stdout)["OCIv1"]["config"]

    def command(self, argv: list[str], user: str | None = None, read_only: bool = False,
                binds: dict[str, Path] | None = None, env: dict[str, str] | None = None) -> list[str]:
        """A new PID + mount namespace: optional bind mounts, the root read-only, /proc, then
        chroot as the image's user with its Env and WorkingDir, and exec argv (PID 1)."""
        user = user or self.config.get("User") or "0:0"
        environ = dict(e.split("=", 1) for e in self.config.get("Env", []))
        environ.update(env or {})
        mnt = shlex.quote(self.mnt)
        steps = ["set -e", "mount --make-rprivate /", f"mount --bind {mnt} {mnt}"]
        for target, source in (binds or {}).items():
            steps.append(f"mount --bind {shlex.quote(str(source))} {mnt}{shlex.quote(target)}")
        if read_only:
            steps.append(f"mount -o remount,bind,ro {mnt}")
        if Path(self.mnt, "proc").is_dir():
            steps.append(f"mount -t proc proc {mnt}/proc")
        workdir = self.config.get("WorkingDir") or "/"
        if Path(self.mnt, "bin/sh").exists():  # the image's WorkingDir, then argv
            argv = ["/bin/sh", "-c", f"cd {shlex.quote(workdir)} && exec " + shlex.join(argv)]
        # env -i (the image's Env, PATH included) runs on the host, then chroot execs argv inside
        steps.append("exec " + shlex.join(["env", "-i", *(f"{k}={v}" for k, v in environ.items()),
                                           shutil.which("chroot") or "/usr/sbin/chroot", f"--userspec={user}", self.mnt, *argv]))
        return ["unshare", "--pid", "--fork", "--mount", "sh", "-c", "\n".join(steps)]

    def run(self, argv: list[str], **kw) -> subprocess.CompletedProcess:
        return subprocess.run(self.command(argv, **kw), capture_output=True, text=True, timeout=120)

    def start(self, argv: list[str], **kw) -> subprocess.Popen:
        return subprocess.Popen(self.command(argv, **kw), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)

    def remove(self) -> None:
        buildah("umount", self.container)
        buildah("rm", self.container)


@pytest.fixture
def rootfs():
    made: list[Rootfs] = []

    def make(archive: Path) -> Rootfs:
        made.append(Rootfs(archive))
        return made[-1]
    yield make
    for r in made:
        r.remove()


def pid1_of(unshare: subprocess.Popen, program: str) -> int:
    """Host pid of the namespace's PID 1 (the child unshare forked), once it has become `program`
    (before that it is the set-up shell, which as PID 1 ignores SIGTERM)."""
    def became() -> int | None:
        assert unshare.poll() is None, unshare.stdout.read()
        children = Path(f"/proc/{unshare.pid}/task/{unshare.pid}/children").read_text().split()
        if children:
            argv0 = Path(f"/proc/{children[0]}/cmdline").read_bytes().split(b"\0")[0].decode()
            if Path(argv0.split(" ")[0]).name == program:  # redis-server retitles itself
                return int(children[0])
        return None
    return until(became, timeout=20, interval=0.05, what=f"PID 1 to become {program}", tolerate=())


def first_answer(server: subprocess.Popen, probe: Callable[[], T], seconds: float = 20) -> T:
    """What ``probe`` returns once the server answers (it raises OSError until then); the server
    must keep running meanwhile."""
    def answered() -> tuple[T] | None:
        assert server.poll() is None, server.stdout.read()
        try:
            return (probe(),)  # a tuple: a falsy answer is an answer too
        except OSError:
            return None
    return until(answered, timeout=seconds, interval=0.2, what="the server's first answer", tolerate=())[0]


def stop_within(proc: subprocess.Popen, program: str, seconds: float) -> tuple[int, float]:
    os.kill(pid1_of(proc, program), signal.SIGTERM)
    started = time.monotonic()
    code = proc.wait(timeout=seconds)
    return code, time.monotonic() - started


def test_every_archive_is_an_oci_layout_with_its_name(images: dict[str, Path]) -> None:
    assert {n.split(":")[0] for n in images} == {f"{PREFIX}/{s}" for s in ("operator", "gateway", "redis", "pause",
                                                                          "test-health-standin")}
    for name, archive in images.items():
        with tarfile.open(archive) as tar:
            members = {m.name.lstrip("./"): m for m in tar.getmembers()}
            assert json.load(tar.extractfile(members["oci-layout"]))["imageLayoutVersion"] == "1.0.0"
            index = json.load(tar.extractfile(members["index.json"]))
            [entry] = index["manifests"]
            assert entry["annotations"]["org.opencontainers.image.ref.name"] == name

            def blob(descriptor: dict) -> bytes:
                algo, digest = descriptor["digest"].split(":")
                data = tar.extractfile(members[f"blobs/{algo}/{digest}"]).read()
                assert len(data) == descriptor["size"] and hashlib.sha256(data).hexdigest() == digest, name
                return data
            manifest = json.loads(blob(entry))
            assert manifest["mediaType"] == entry["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
            config = json.loads(blob(manifest["config"]))
            assert config["architecture"] == "amd64" and config["os"] == "linux"
            assert manifest["layers"] and len(config["rootfs"]["diff_ids"]) == len(manifest["layers"])
            for layer in manifest["layers"]:
                blob(layer)
        print(f"{name}: {archive.stat().st_size / 1e6:.1f} MB ({archive.name})")


def test_gateway_image_runs_praisonai_as_10001_under_tini(images, rootfs, tmp_path: Path) -> None:
    name, archive = image(images, "gateway")
    assert name.endswith(":0.1.16")
    gw = rootfs(archive)
    assert gw.config["User"] == "10001:10001" and gw.config["Entrypoint"] == ["tini", "--"]
    assert not gw.config.get("Cmd"), "no command baked to a config: the operator's Deployment sets it"
    # the operator's command starts with plain `python3`: it must be the venv's, with praisonai
    script = ("import os, sys, praisonai_bot; "
              "print(os.getuid(), os.getgid(), sys.executable, os.environ['HOME'], os.getppid(), "
              "open('/proc/1/cmdline').read().split(chr(0))[0])")
    done = gw.run(["tini", "--", "python3", "-c", script], read_only=True)
    assert done.returncode == 0, done.stdout + done.stderr
    uid, gid, exe, home, ppid, pid1 = done.stdout.split()
    assert (uid, gid, exe, home) == ("10001", "10001", "/opt/gateway/bin/python3", "/var/lib/gateway/home")
    assert (ppid, pid1) == ("1", "tini"), "tini is PID 1 and the process its child"
    versions = gw.run(["python3", "-c", "import importlib.metadata as m; print(m.version('praisonai-bot'))"])
    assert versions.stdout.strip() == "0.1.16", versions.stderr
    # the directories the operator mounts volumes on exist and belong to 10001
    for path in ("/etc/gateway-operator", "/var/lib/gateway/work", "/var/lib/gateway/home/.praisonai/state", "/tmp"):
        assert Path(gw.mnt + path).is_dir(), path
    assert Path(gw.mnt + "/var/lib/gateway/home/.praisonai/state").stat().st_uid == 10001
    # SIGTERM to PID 1 (what the kubelet sends) stops the pod at once, not after the grace period
    sleeper = gw.start(["tini", "--", "python3", "-c", "import time; time.sleep(600)"], read_only=True)
    tini = pid1_of(sleeper, "tini")
    until(lambda: Path(f"/proc/{tini}/task/{tini}/children").read_text().split(), timeout=20, interval=0.05,
          what="python started under tini", tolerate=())
    code, took = stop_within(sleeper, "tini", 10)
    assert code == 128 + signal.SIGTERM and took < 5, (code, took, sleeper.stdout.read())


def resp(port: int, *commands: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"".join(commands))
        reply = s.recv(4096)
        s.settimeout(0.5)  # then whatever else the server sends
        try:
            while chunk := s.recv(4096):
                reply += chunk
        except socket.timeout:
            pass
        return reply


def test_redis_image_serves_as_999_with_a_read_only_root(images, rootfs, tmp_path: Path) -> None:
    name, archive = image(images, "redis")
    redis = rootfs(archive)
    data = tmp_path / "data"
    data.mkdir()
    os.chown(data, 999, 999)  # the emptyDir with fsGroup 999
    port = free_port()  # the Deployment's 6379 may be taken on this host: same command otherwise
    command = f'exec redis-server --port {port} --bind 127.0.0.1 --requirepass "$REDIS_PASSWORD" --save "" --appendonly no'
    server = redis.start(["sh", "-c", command], user="999:999", read_only=True, binds={"/data": data},
                         env={"REDIS_PASSWORD": "s3cret"})
    try:
        reply = first_answer(server, lambda: resp(port, b"AUTH s3cret\r\n", b"PING\r\n", b"CONFIG GET dir\r\n"))
        assert reply.startswith(b"+OK\r\n+PONG\r\n") and b"/data" in reply, reply
        assert resp(port, b"PING\r\n").startswith(b"-NOAUTH"), "the password is required"
        owner = Path(f"/proc/{pid1_of(server, 'redis-server')}/status").read_text()
        assert "\nUid:\t999\t" in owner
    finally:
        code, took = stop_within(server, "redis-server", 10)
    assert code in (0, 128 + signal.SIGTERM) and took < 5, (code, took)


def test_operator_image_cli_works_as_10001(images, rootfs) -> None:
    name, archive = image(images, "operator")
    op = rootfs(archive)
    assert op.config["User"] == "10001:10001" and op.config["Entrypoint"] == ["gateway-operator"]
    done = op.run(["gateway-operator", "--help"], read_only=True)
    assert done.returncode == 0 and "crd" in done.stdout, done.stdout + done.stderr
    crd = op.run(["gateway-operator", "crd"], read_only=True)
    assert "gatewaydeployments.gateway-operator.dev" in crd.stdout, crd.stderr


def test_pause_image_sleeps_until_sigterm(images, rootfs) -> None:
    name, archive = image(images, "pause")
    pause = rootfs(archive)
    assert archive.stat().st_size < 5_000_000
    proc = pause.start(pause.config["Entrypoint"], read_only=True)
    stays(lambda: proc.poll() is None, 1, interval=0.1, what="pause sleeping")
    code, took = stop_within(proc, "pause", 5)
    assert code == 0 and took < 2


def test_health_standin_image_answers_what_it_is_told_as_10001(images, rootfs) -> None:
    """The TEST IMAGE the real-node tests run as replicas: whatever command the operator's pod
    gives, `python3` is the HEALTH ENDPOINT STAND-IN; it answers as told and stops on SIGTERM."""
    name, archive = image(images, "test-health-standin")
    standin = rootfs(archive)
    assert standin.config["User"] == "10001:10001"
    port = free_port()  # the pod's 8765 may be taken on this host: same command otherwise
    proc = standin.start(["python3", "/etc/gateway-operator/launch.py", "--config", "/etc/gateway-operator/gateway.yaml"],
                         read_only=True, env={"GATEWAY_PORT": str(port)})
    base = f"http://127.0.0.1:{port}"
    try:
        healthy = first_answer(proc, lambda: json.loads(urllib.request.urlopen(f"{base}/health", timeout=5).read()))
        assert healthy["status"] == "healthy" and "degraded_owners" not in healthy
        owner = {"owner_kind": "gateway", "owner_id": "durability:idempotency", "state": "cold", "reason": "r"}
        urllib.request.urlopen(urllib.request.Request(f"{base}/standin", method="PUT", data=json.dumps(
            {"mode": "answer", "degraded_owners": [owner]}).encode()), timeout=5)
        assert json.loads(urllib.request.urlopen(f"{base}/health", timeout=5).read())["degraded_owners"] == [owner]
        assert "\nUid:\t10001\t" in Path(f"/proc/{pid1_of(proc, 'python3')}/status").read_text()
    finally:
        code, took = stop_within(proc, "python3", 5)
    assert code == 0 and took < 2, (code, took)
