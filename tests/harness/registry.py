"""A real OCI registry and the release tools, for the release tests (issue 55).

``Registry`` is CNCF distribution's ``registry`` (built by hack/build-binaries.sh --release) serving
TLS on a loopback port, with a certificate from a CA made per run (harness.tls) and its storage in
a throw-away directory. ``trusted_by_node`` writes the real node's containerd a ``hosts.toml`` for
it (the CA, pull and resolve), so the kubelet pulls from it, and takes it away after. ``Cosign``
is cosign with a key pair made per run, verifying the way docs/install.md tells users to."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import yaml

from . import tls
from .cluster import REPO, Cluster, tool
from .processes import free_port, terminate
from .wait import until


@dataclass
class Registry:
    """The registry at ``host`` (127.0.0.1:port) over TLS; ``ca_path`` is the CA that signed it and
    ``cert_dir`` a directory holding only that CA (buildah's --cert-dir)."""
    directory: Path
    host: str
    ca_path: Path
    proc: "subprocess.Popen[bytes]"

    @property
    def cert_dir(self) -> Path:
        return self.directory / "trust"

    @classmethod
    def start(cls, directory: Path) -> "Registry":
        directory.mkdir(parents=True, exist_ok=True)
        ca = tls.make_ca(directory / "ca", name="gateway-operator test registry CA")
        cert = tls.server_cert(ca, directory / "server", dns=("localhost",), ips=("127.0.0.1",))
        (directory / "trust").mkdir()  # cert_dir
        shutil.copy(ca.cert_path, directory / "trust/ca.crt")
        port = free_port()
        config = {"version": 0.1, "log": {"level": "warn", "accesslog": {"disabled": True}},
                  "storage": {"filesystem": {"rootdirectory": str(directory / "storage")},
                              "delete": {"enabled": True}},
                  "http": {"addr": f"127.0.0.1:{port}",
                           "tls": {"certificate": str(cert.cert_path), "key": str(cert.key_path)}}}
        (directory / "config.yml").write_text(yaml.safe_dump(config))
        log = (directory / "registry.log").open("wb")
        # no OpenTelemetry exporter: the registry sends nothing anywhere
        env = dict(os.environ, OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="none", OTEL_LOGS_EXPORTER="none")
        proc = subprocess.Popen([tool("registry"), "serve", str(directory / "config.yml")], stdout=log,
                                stderr=subprocess.STDOUT, env=env)
        registry = cls(directory, f"127.0.0.1:{port}", ca.cert_path, proc)
        until(registry.answers, timeout=30, interval=0.2, what=f"the registry at {registry.host} answering /v2/")
        return registry

    def context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_path))

    def answers(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"the registry exited {self.proc.returncode}: "
                               f"{(self.directory / 'registry.log').read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"https://{self.host}/v2/", context=self.context(), timeout=5) as answer:
                return answer.status == 200
        except OSError:
            return False

    def get(self, path: str, accept: str = "application/vnd.oci.image.index.v1+json") -> tuple[int, Any]:
        """GET /v2/<path>: (status, JSON body or None)."""
        request = urllib.request.Request(f"https://{self.host}/v2/{path}", headers={"Accept": accept})
        try:
            with urllib.request.urlopen(request, context=self.context(), timeout=30) as answer:
                return answer.status, json.load(answer)
        except urllib.error.HTTPError as error:
            return error.code, None

    def stop(self) -> None:
        terminate(self.proc, grace=10)

    @contextlib.contextmanager
    def trusted_by_node(self, cluster: Cluster) -> Iterator[None]:
        """The real node's containerd pulls from this registry, trusting its CA (its registry
        config_path holds one hosts.toml per host, read at each pull), until the block ends."""
        assert cluster.directory is not None
        hosts = cluster.directory / "node/containerd/certs.d" / self.host
        hosts.mkdir(parents=True)
        ca = hosts / "ca.crt"
        shutil.copy(self.ca_path, ca)
        (hosts / "hosts.toml").write_text(
            f'server = "https://{self.host}"\n\n[host."https://{self.host}"]\n'
            f'  capabilities = ["pull", "resolve"]\n  ca = "{ca}"\n')
        try:
            yield
        finally:
            shutil.rmtree(hosts)


@dataclass
class Cosign:
    """cosign with this run's key pair; every call trusts the registry's CA. Nothing here reaches a
    transparency log or sigstore's TUF repository, so signatures are made without a log entry and
    verified against a trusted root that holds no authority (``--trusted-root``): the key alone."""
    key: Path
    public_key: Path
    password: str
    registry: Registry

    @classmethod
    def key_pair(cls, directory: Path, registry: Registry) -> "Cosign":
        directory.mkdir(parents=True, exist_ok=True)
        password = os.urandom(12).hex()
        subprocess.run([tool("cosign"), "generate-key-pair", "--output-key-prefix", str(directory / "cosign")],
                       check=True, capture_output=True, env=dict(os.environ, COSIGN_PASSWORD=password))
        return cls(directory / "cosign.key", directory / "cosign.pub", password, registry)

    def env(self) -> dict[str, str]:
        bundle = self.registry.directory / "trust.pem"
        if not bundle.exists():
            system = Path("/etc/ssl/certs/ca-certificates.crt")
            bundle.write_text((system.read_text() if system.exists() else "") + self.registry.ca_path.read_text())
        return dict(os.environ, COSIGN_PASSWORD=self.password, SSL_CERT_FILE=str(bundle))

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([tool("cosign"), *args], capture_output=True, text=True, env=self.env(), timeout=300)

    def offline(self) -> list[str]:
        root = self.key.parent / "trusted_root.json"
        if not root.exists():
            root.write_text(json.dumps({"mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1"}))
        return ["--key", str(self.public_key), "--new-bundle-format", "--insecure-ignore-tlog=true",
                "--trusted-root", str(root)]

    def verify(self, reference: str) -> subprocess.CompletedProcess[str]:
        """``cosign verify`` as docs/install.md gives it, against this run's public key."""
        return self.run("verify", *self.offline(), reference)

    def verify_sbom(self, reference: str) -> subprocess.CompletedProcess[str]:
        """``cosign verify-attestation --type spdxjson``: the SBOM's signed statements, one JSON line each."""
        return self.run("verify-attestation", *self.offline(), "--type", "spdxjson", reference)


def release(directory: Path, version: str, registry: Registry, cosign: Cosign, tree: Path = REPO,
            platforms: str = "linux/amd64") -> tuple[dict[str, Any], float]:
    """``make release VERSION=... REGISTRY=...`` in ``tree``: its release.json and how long it took."""
    started = time.monotonic()
    out = directory / f"dist-{version}"
    done = subprocess.run(["make", "-s", "release", f"VERSION={version}", f"REGISTRY={registry.host}"], cwd=tree,
                          env=dict(cosign.env(), PLATFORMS=platforms, COSIGN_KEY=str(cosign.key), COSIGN_TLOG="0",
                                   REGISTRY_CA_FILE=str(registry.ca_path), RELEASE_DIR=str(out)),
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, f"make release failed ({done.returncode}):\n{done.stderr[-4000:]}"
    return json.loads((out / "release.json").read_text()), time.monotonic() - started
