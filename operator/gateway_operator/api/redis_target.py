"""Where a GatewayDeployment's Redis is: resolved from ``spec.redis`` without any I/O.

The grammar below is the only definition of a Redis URL and host: the CRD's CEL rules
(validation.RULES) and the operator's parser use the same regular expressions, so what
admission lets through is exactly what the operator can parse (no credentials, no query,
port 1-65535, db 0-15, a DNS name, an IPv4 address or a bracketed IPv6 address).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from gateway_operator.api import MAX_HOST_LENGTH, RedisSpec, SecretKeyRef, TLSOptions, default_prefix

_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
DNS_NAME = rf"{_LABEL}(\.{_LABEL})*\.?"
_H = "[0-9A-Fa-f]{1,4}"
# an IPv6 address in any of its compressed forms (no zone, no embedded IPv4)
IPV6 = (rf"(({_H}:){{7}}{_H}|({_H}:){{1,7}}:|({_H}:){{1,6}}:{_H}|({_H}:){{1,5}}(:{_H}){{1,2}}|"
        rf"({_H}:){{1,4}}(:{_H}){{1,3}}|({_H}:){{1,3}}(:{_H}){{1,4}}|({_H}:){{1,2}}(:{_H}){{1,5}}|"
        rf"{_H}:(:{_H}){{1,6}}|:((:{_H}){{1,7}}|:))")
PORT = r"([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
DB = r"([0-9]|1[0-5])"
# spec.redis.host: a DNS name or IPv4 address, or an IPv6 address without brackets
HOST_PATTERN = rf"^({DNS_NAME}|{IPV6})$"
# spec.redis.url; the groups are read by parse_url (host, port, db)
URL_PATTERN = rf"^rediss?://({DNS_NAME}|\[{IPV6}\])(:{PORT})?(/{DB})?$"
_URL_RE = re.compile(URL_PATTERN)
_HOST_RE = re.compile(HOST_PATTERN)


class InvalidRedisURL(ValueError):
    """spec.redis names a Redis the grammar does not accept (reported as a condition)."""


@dataclass(frozen=True)
class RedisTarget:
    host: str
    port: int
    db: int
    tls: bool
    prefix: str
    password_ref: SecretKeyRef | None
    managed: bool = False
    username_ref: SecretKeyRef | None = None
    tls_options: TLSOptions = TLSOptions()

    @property
    def ca_ref(self) -> SecretKeyRef | None:
        """The CA bundle the connection is checked against (only a TLS connection has one)."""
        return self.tls_options.ca_ref if self.tls else None

    @property
    def server_name(self) -> str:
        """The name a TLS server's certificate must carry (and the SNI sent)."""
        return self.tls_options.server_name or self.host

    @property
    def url(self) -> str:
        """Connection URL without credentials (the password travels separately)."""
        scheme = "rediss" if self.tls else "redis"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}://{host}:{self.port}/{self.db}"

    @property
    def endpoint(self) -> str:
        """What status shows: no scheme, no credentials."""
        return f"{self.host}:{self.port}/{self.db}"




def valid_host(host: str) -> bool:
    return len(host) <= MAX_HOST_LENGTH and bool(_HOST_RE.match(host))


def parse_url(url: str) -> tuple[bool, str, int, int]:
    """(tls, host, port, db) of a URL the grammar accepts; InvalidRedisURL otherwise."""
    match = _URL_RE.match(url)
    if match is None:
        raise InvalidRedisURL("spec.redis.url must look like redis://host:port/db or rediss://host:port/db "
                              "(no credentials, no query; port 1-65535, db 0-15)")
    authority = url.split("://", 1)[1]
    host = match.group(1)
    rest = authority[len(host):]
    port_text, _, db_text = rest.lstrip(":").partition("/") if rest.startswith(":") else ("", "", rest.lstrip("/"))
    host = host[1:-1] if host.startswith("[") else host
    if len(host) > MAX_HOST_LENGTH:
        raise InvalidRedisURL(f"spec.redis.url host is longer than {MAX_HOST_LENGTH} characters")
    return url.startswith("rediss://"), host, int(port_text or 6379), int(db_text or 0)


def managed_redis_name(name: str) -> str:
    return f"{name}-redis"


def resolve(redis: RedisSpec, namespace: str, name: str) -> RedisTarget | None:
    """The Redis this gateway uses, or None when spec.redis names none."""
    prefix = redis.prefix or default_prefix(namespace, name)
    if redis.managed:
        svc = managed_redis_name(name)
        return RedisTarget(host=f"{svc}.{namespace}.svc", port=6379, db=0, tls=False, prefix=prefix,
                           password_ref=SecretKeyRef(svc, "password"), managed=True)
    if redis.url:
        tls, host, port, db = parse_url(redis.url)
        return RedisTarget(host=host, port=port, db=db, tls=tls or redis.tls, prefix=prefix,
                           password_ref=redis.password_ref, username_ref=redis.username_ref,
                           tls_options=redis.tls_options)
    if redis.host:
        if not valid_host(redis.host):
            raise InvalidRedisURL("spec.redis.host must be a DNS name or an IP address (no port, no credentials)")
        return RedisTarget(host=redis.host, port=redis.port, db=redis.db, tls=redis.tls,
                           prefix=prefix, password_ref=redis.password_ref, username_ref=redis.username_ref,
                           tls_options=redis.tls_options)
    return None
