"""Throw-away TLS material for tests: certificate authorities and server certificates, made per run.

Everything is generated in-process with ``cryptography`` (EC P-256 keys, fast) and written as PEM
files, so a TLS server (``RedisServer(tls=...)``) and its clients can be pointed at paths::

    ca = make_ca(tmp_path / "ca")
    wrong = make_ca(tmp_path / "wrong-ca", name="some other CA")   # trusts nothing of ``ca``'s
    good = server_cert(ca, tmp_path / "good", dns=("localhost",), ips=("127.0.0.1",))
    expired = server_cert(ca, tmp_path / "old", not_after=datetime.now(timezone.utc) - timedelta(days=1))
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class CA:
    """A certificate authority: ``cert_path``/``key_path`` on disk, ``pem`` its certificate's text."""
    cert_path: Path
    key_path: Path
    pem: str
    cert: x509.Certificate = field(repr=False, compare=False)
    key: ec.EllipticCurvePrivateKey = field(repr=False, compare=False)


@dataclass(frozen=True)
class ServerCert:
    """A server certificate and key signed by a CA; ``ca_path``/``ca_pem`` are that (signing) CA's."""
    cert_path: Path
    key_path: Path
    ca_path: Path
    ca_pem: str
    dns: tuple[str, ...]
    ips: tuple[str, ...]
    not_valid_before: datetime
    not_valid_after: datetime

    @property
    def valid_now(self) -> bool:
        return self.not_valid_before <= datetime.now(timezone.utc) <= self.not_valid_after


def _write(directory: Path, stem: str, cert: x509.Certificate,
           key: ec.EllipticCurvePrivateKey) -> tuple[Path, Path, str]:
    directory.mkdir(parents=True, exist_ok=True)
    cert_pem = cert.public_bytes(serialization.Encoding.PEM).decode()
    cert_path, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
    cert_path.write_text(cert_pem)
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_path.chmod(0o600)
    return cert_path, key_path, cert_pem


def make_ca(directory: Path, name: str = "gwop test CA") -> CA:
    """A self-signed CA valid from an hour ago for ten days, written as ``ca.crt``/``ca.key``."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.now(timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(hours=1)).not_valid_after(now + timedelta(days=10))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path, pem = _write(Path(directory), "ca", cert, key)
    return CA(cert_path=cert_path, key_path=key_path, pem=pem, cert=cert, key=key)


def load_ca(directory: Path) -> CA:
    """A CA already on disk as ``ca.crt``/``ca.key`` (a cluster's own, hack/cluster.sh's RSA one too)."""
    directory = Path(directory)
    cert_path, key_path = directory / "ca.crt", directory / "ca.key"
    pem = cert_path.read_text()
    return CA(cert_path=cert_path, key_path=key_path, pem=pem, cert=x509.load_pem_x509_certificate(pem.encode()),
              key=serialization.load_pem_private_key(key_path.read_bytes(), password=None))  # type: ignore[arg-type]


def server_cert(ca: CA, directory: Path, dns: Sequence[str] = ("localhost",), ips: Sequence[str] = ("127.0.0.1",),
                not_before: datetime | None = None, not_after: datetime | None = None,
                stem: str = "server") -> ServerCert:
    """A server certificate for ``dns`` names and ``ips`` (its SAN), signed by ``ca``, written as
    ``<stem>.crt``/``<stem>.key`` plus a copy of the CA as ``ca.crt`` in ``directory``. The validity
    window defaults to an hour ago .. a day ahead; a ``not_after`` in the past makes an expired one."""
    now = datetime.now(timezone.utc)
    not_after = not_after or now + timedelta(days=1)
    not_before = not_before or min(now - timedelta(hours=1), not_after - timedelta(hours=1))
    key = ec.generate_private_key(ec.SECP256R1())
    san = [x509.DNSName(d) for d in dns] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    cn = (list(dns) + list(ips) + ["server"])[0]
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
            .issuer_name(ca.cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(not_before).not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName(san), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False)
            .sign(ca.key, hashes.SHA256()))
    directory = Path(directory)
    cert_path, key_path, _ = _write(directory, stem, cert, key)
    ca_path = directory / "ca.crt"
    ca_path.write_text(ca.pem)
    return ServerCert(cert_path=cert_path, key_path=key_path, ca_path=ca_path, ca_pem=ca.pem, dns=tuple(dns),
                      ips=tuple(ips), not_valid_before=not_before, not_valid_after=not_after)
