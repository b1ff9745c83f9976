"""RUN A POD'S CONTAINER AS A REAL LOCAL PROCESS AT ITS POD IP.

The kubelet stand-in (hack/kubelet_standin.py) binds pods, hands each a distinct pod IP in
127.1.0.0/16 and reports it Running/Ready, but runs nothing. ``run_pod_locally`` is the
missing "start the container" step, done from the test process for one pod the stand-in
reports: it runs the container's own command, with the pod's own volumes and environment,
as a local process listening on the pod's IP - so the operator's ``GET http://<podIP>:8765/
health`` polls reach a real process exactly as they would reach the pod in a cluster.

What it does with the pod spec, as a kubelet would:

* volumes: every mounted ``configMap`` / ``secret`` is fetched with kubectl and its keys
  written as files (``items`` honoured); every ``emptyDir`` is an empty directory. All of
  them live under one temporary root, at ``<root><mountPath>``;
* env: ``value`` (with ``$(VAR)`` expansion), ``secretKeyRef`` (kubectl + base64 decode),
  ``configMapKeyRef``, ``fieldRef`` (``status.podIP``, ``metadata.name`` ...) and
  ``envFrom``;
* argv: ``command`` + ``args`` (with ``$(VAR)`` expansion).

Anything else (other volume types, ``subPath``, an image entrypoint without ``command``)
raises ``PodRunError`` rather than running something the pod would not.

What it has to change so a container's view of the filesystem works on this host:

* every absolute path in argv and env values that lies in a mount, or is a directory above
  one (``HOME=/var/lib/gateway/home`` holds the ``.praisonai`` mount), becomes the same
  path under the root;
* ``--host 0.0.0.0`` becomes ``--host <podIP>``: the pod's network namespace is the pod IP;
* ``python3`` is this interpreter (``sys.executable``), which has the gateway installed,
  as the image would;
* the process does not inherit the test environment: it gets PATH and what an image would
  set (LANG, PYTHONUNBUFFERED), TMPDIR when ``/tmp`` is a mount, then the pod's env, then
  ``extra_env`` (e.g. the LLM stand-in's ``OPENAI_BASE_URL``), later ones winning;
* ``ALLOW_LOOPBACK_BYPASS=false``: pod IPs here are loopback addresses, and the gateway
  waives its auth token for loopback binds; a pod IP in a cluster is not loopback, so the
  local process must be as strict as the pod would be.
"""
from __future__ import annotations

import base64
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path, PurePosixPath
from typing import Any, Mapping

from .cluster import Cluster
from .processes import terminate

# A pod's process sees none of the test session's environment, only what an image sets.
IMAGE_ENV = {"LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1"}
_VAR_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)|\$\$")
_PYTHONS = {"python", "python3"}


class PodRunError(RuntimeError):
    """The pod cannot run here (unsupported spec, missing input) or did not come up."""


class LocalPodProcess:
    """The real process of one pod's container, listening at the pod IP."""

    def __init__(self, namespace: str, pod: str, ip: str, port: int, root: Path, argv: list[str],
                 env: dict[str, str], proc: subprocess.Popen[bytes], log_path: Path) -> None:
        self.namespace, self.pod, self.ip, self.port = namespace, pod, ip, port
        self.root, self.argv, self.env, self.proc, self.log_path = root, argv, env, proc, log_path
        self._log_text: str | None = None

    def __repr__(self) -> str:
        return f"LocalPodProcess({self.namespace}/{self.pod} at {self.ip}:{self.port}, pid {self.proc.pid})"

    @property
    def base_url(self) -> str:
        return f"http://{self.ip}:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def logs(self) -> str:
        """stdout and stderr of the process (kept after ``stop``)."""
        if self._log_text is not None:
            return self._log_text
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM (what the kubelet sends), SIGKILL after ``timeout``; returns the exit code
        and removes the pod's volumes. Safe to call twice."""
        terminate(self.proc, grace=timeout)
        if self._log_text is None:
            self._log_text = self.logs()
            shutil.rmtree(self.root, ignore_errors=True)
        return self.proc.returncode

    def wait_live(self, path: str = "/live", timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise PodRunError(f"{self!r} exited with {self.proc.returncode} before {path} answered:\n"
                                  f"{_tail(self.logs())}")
            try:
                with urllib.request.urlopen(self.base_url + path, timeout=2) as response:
                    if response.status == 200:
                        return
                    last = response.status
            except urllib.error.HTTPError as e:
                last = e.code
            except OSError as e:
                last = e
            time.sleep(0.2)
        raise PodRunError(f"{self!r}: GET {path} did not answer 200 within {timeout}s (last: {last!r}):\n"
                          f"{_tail(self.logs())}")


def run_pod_locally(cluster: Cluster, pod: Mapping[str, Any], *, container: str | None = None,
                    port: int = 8765, extra_env: Mapping[str, str] | None = None,
                    live_path: str | None = "/live", timeout: float = 60.0) -> LocalPodProcess:
    """Start ``container`` (default: the first) of ``pod`` (kubectl JSON) as a local process
    bound to the pod IP, and wait until ``GET <live_path>`` on ``podIP:port`` answers 200."""
    meta, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
    namespace, name, ip = meta["namespace"], meta["name"], status.get("podIP")
    if not ip:
        raise PodRunError(f"pod {namespace}/{name} has no pod IP yet")
    containers = spec["containers"]
    c = next((x for x in containers if x["name"] == container), None) if container else containers[0]
    if c is None:
        raise PodRunError(f"pod {namespace}/{name} has no container {container!r}")
    if not c.get("command"):
        raise PodRunError("only containers with an explicit command can run here (no image entrypoint)")
    if _listening(ip, port):
        raise PodRunError(f"something already listens on {ip}:{port}: another cluster on this host handed "
                          "out the same pod IP (the kubelet stand-in's pool is per cluster)")

    root = Path(tempfile.mkdtemp(prefix=f"gwop-pod-{name}-"))
    try:
        mounts = _materialize_volumes(cluster, namespace, spec.get("volumes") or [], c.get("volumeMounts") or [],
                                      root)
        rewrite = _PathRewriter(root, mounts)
        env = _container_env(cluster, pod, c)
        argv = [_expand(a, env) for a in c["command"] + (c.get("args") or [])]
        argv = _bind_pod_ip([rewrite.arg(a) for a in argv], ip)
        if PurePosixPath(argv[0]).name in _PYTHONS:
            argv[0] = sys.executable
        process_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **IMAGE_ENV,
                       "ALLOW_LOOPBACK_BYPASS": "false"}
        if "/tmp" in mounts:
            process_env["TMPDIR"] = str(rewrite.path("/tmp"))
        process_env.update({k: rewrite.value(v) for k, v in env.items()})
        process_env.update(extra_env or {})
        cwd = rewrite.path(c["workingDir"]) if c.get("workingDir") else root
        Path(cwd).mkdir(parents=True, exist_ok=True)
        log_path = root / "container.log"  # outside every mount
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(argv, env=process_env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    runner = LocalPodProcess(namespace, name, ip, port, root, argv, process_env, proc, log_path)
    if live_path:
        try:
            runner.wait_live(live_path, timeout)
        except BaseException:
            runner.stop()
            raise
    return runner


# -- volumes -----------------------------------------------------------------------------

def _materialize_volumes(cluster: Cluster, namespace: str, volumes: list[dict[str, Any]],
                         mounts: list[dict[str, Any]], root: Path) -> dict[str, Path]:
    """Writes every mounted volume at ``<root><mountPath>``; returns mountPath -> directory."""
    by_name = {v["name"]: v for v in volumes}
    placed: dict[str, Path] = {}
    for mount in sorted(mounts, key=lambda m: len(m["mountPath"])):  # parents before nested mounts
        mount_path = mount["mountPath"].rstrip("/") or "/"
        if mount.get("subPath") or mount.get("subPathExpr"):
            raise PodRunError(f"volumeMount {mount['name']}: subPath is not supported here")
        volume = by_name.get(mount["name"])
        if volume is None:
            raise PodRunError(f"volumeMount {mount['name']!r} names no volume of the pod")
        target = root / mount_path.lstrip("/")
        target.mkdir(parents=True, exist_ok=True)
        if "emptyDir" in volume:
            pass
        elif "configMap" in volume:
            source = volume["configMap"]
            obj = _get_optional(cluster, namespace, "configmap", source["name"], source.get("optional"))
            files = {k: v.encode() for k, v in (obj.get("data") or {}).items()}
            files.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
            _write_files(target, files, source.get("items"), mount.get("readOnly", False))
        elif "secret" in volume:
            source = volume["secret"]
            obj = _get_optional(cluster, namespace, "secret", source["secretName"], source.get("optional"))
            files = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
            _write_files(target, files, source.get("items"), mount.get("readOnly", False))
        else:
            kind = next((k for k in volume if k != "name"), "?")
            raise PodRunError(f"volume {volume['name']!r}: {kind} volumes are not supported here")
        placed[mount_path] = target
    return placed


def _write_files(target: Path, files: Mapping[str, bytes], items: list[dict[str, Any]] | None,
                 read_only: bool) -> None:
    chosen = {i["key"]: i.get("path") or i["key"] for i in items} if items else {k: k for k in files}
    for key, rel in chosen.items():
        if key not in files:
            raise PodRunError(f"volume item {key!r} is not in the source object")
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(files[key])
        if read_only:
            path.chmod(0o444)


def _get_optional(cluster: Cluster, namespace: str, kind: str, name: str, optional: bool | None) -> dict[str, Any]:
    proc = cluster.kubectl("get", kind, name, "-n", namespace, "-o", "json", check=False)
    if proc.returncode == 0:
        return json.loads(proc.stdout)
    if optional and "NotFound" in proc.stderr:
        return {}
    raise PodRunError(f"{kind} {namespace}/{name} cannot be read: {proc.stderr.strip()}")


# -- environment -------------------------------------------------------------------------

def _container_env(cluster: Cluster, pod: Mapping[str, Any], c: Mapping[str, Any]) -> dict[str, str]:
    """The container's environment as the kubelet builds it: envFrom first, then env in order,
    each value expanding ``$(VAR)`` of the variables defined before it."""
    namespace = pod["metadata"]["namespace"]
    objects: dict[tuple[str, str], dict[str, Any]] = {}

    def source(kind: str, name: str, optional: bool | None) -> dict[str, Any]:
        if (kind, name) not in objects:
            objects[(kind, name)] = _get_optional(cluster, namespace, kind, name, optional)
        return objects[(kind, name)]

    def data(kind: str, obj: Mapping[str, Any]) -> dict[str, str]:
        raw = obj.get("data") or {}
        return {k: base64.b64decode(v).decode() for k, v in raw.items()} if kind == "secret" else dict(raw)

    env: dict[str, str] = {}
    for ref in c.get("envFrom") or []:
        kind, src = ("secret", ref["secretRef"]) if "secretRef" in ref else ("configmap", ref["configMapRef"])
        for key, value in data(kind, source(kind, src["name"], src.get("optional"))).items():
            env[ref.get("prefix", "") + key] = value
    for var in c.get("env") or []:
        name = var["name"]
        if "valueFrom" not in var:
            env[name] = _expand(var.get("value", ""), env)
            continue
        value_from = var["valueFrom"]
        if "secretKeyRef" in value_from or "configMapKeyRef" in value_from:
            kind, ref = (("secret", value_from["secretKeyRef"]) if "secretKeyRef" in value_from
                         else ("configmap", value_from["configMapKeyRef"]))
            values = data(kind, source(kind, ref["name"], ref.get("optional")))
            if ref["key"] in values:
                env[name] = values[ref["key"]]
            elif not ref.get("optional"):
                raise PodRunError(f"env {name}: {kind} {ref['name']!r} has no key {ref['key']!r} "
                                  "(the kubelet would report CreateContainerConfigError)")
        elif "fieldRef" in value_from:
            env[name] = _field(pod, value_from["fieldRef"]["fieldPath"])
        else:
            raise PodRunError(f"env {name}: {sorted(value_from)} is not supported here")
    return env


def _field(pod: Mapping[str, Any], path: str) -> str:
    meta, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
    simple = {"metadata.name": meta.get("name"), "metadata.namespace": meta.get("namespace"),
              "metadata.uid": meta.get("uid"), "spec.nodeName": spec.get("nodeName"),
              "spec.serviceAccountName": spec.get("serviceAccountName"), "status.podIP": status.get("podIP"),
              "status.hostIP": status.get("hostIP")}
    if path in simple:
        return str(simple[path] or "")
    match = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
    if match:
        return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
    raise PodRunError(f"fieldRef {path!r} is not supported here")


def _expand(value: str, env: Mapping[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: defined variables are substituted, ``$$`` is a literal
    ``$``, and a reference to an undefined variable stays as written."""
    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))
    return _VAR_REF.sub(sub, value)


# -- container paths and the pod's network -------------------------------------------------

class _PathRewriter:
    """Container paths -> the same paths under the pod's root, for the part of the container
    filesystem the pod brings: what lies in a mount, and the directories above mounts
    themselves (never ``/``); anything else - the image's ``/usr/bin``, ``/etc/passwd`` -
    stays as it is."""

    def __init__(self, root: Path, mounts: Mapping[str, Path]) -> None:
        self.root = root
        self.mounts = {PurePosixPath(m) for m in mounts}
        self.parents = {p for m in self.mounts for p in m.parents} - {PurePosixPath("/")}

    def _pod_path(self, path: PurePosixPath) -> bool:
        return path in self.parents or any(path == m or m in path.parents for m in self.mounts)

    def path(self, value: str) -> Path:
        return self.root / value.lstrip("/")

    def value(self, value: str) -> str:
        if not value.startswith("/"):
            return value
        return str(self.path(value)) if self._pod_path(PurePosixPath(value)) else value

    def arg(self, value: str) -> str:
        if value.startswith("--") and "=" in value:  # --config=/etc/...
            flag, _, rest = value.partition("=")
            return f"{flag}={self.value(rest)}"
        return self.value(value)


def _bind_pod_ip(argv: list[str], ip: str) -> list[str]:
    """``--host 0.0.0.0`` (every interface of the pod) -> ``--host <podIP>``: on this host the
    pod's one interface is its address."""
    out = list(argv)
    for i, arg in enumerate(out):
        if arg == "--host" and i + 1 < len(out) and out[i + 1] in ("0.0.0.0", "::"):
            out[i + 1] = ip
        elif arg in ("--host=0.0.0.0", "--host=::"):
            out[i] = f"--host={ip}"
    return out


def _listening(ip: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((ip, port)) == 0


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])
