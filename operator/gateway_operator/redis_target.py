"""Where a GatewayDeployment's Redis is: resolved from ``spec.redis`` without any I/O."""
from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from .api import RedisSpec, SecretKeyRef, default_prefix


class InvalidRedisURL(ValueError):
    """spec.redis.url cannot be parsed (reported as a condition, never raised to kopf)."""


@dataclass(frozen=True)
class RedisTarget:
    host: str
    port: int
    db: int
    tls: bool
    prefix: str
    password_ref: SecretKeyRef | None
    managed: bool = False

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
        return _from_url(redis, prefix)
    if redis.host:
        return RedisTarget(host=redis.host, port=redis.port, db=redis.db, tls=redis.tls,
                           prefix=prefix, password_ref=redis.password_ref)
    return None


def _from_url(redis: RedisSpec, prefix: str) -> RedisTarget:
    assert redis.url is not None
    try:
        parts = urlsplit(redis.url)
        port = parts.port or 6379
    except ValueError as e:
        raise InvalidRedisURL(f"spec.redis.url is not a valid URL: {e}") from None
    if parts.scheme not in ("redis", "rediss"):
        raise InvalidRedisURL("spec.redis.url must start with redis:// or rediss://")
    if parts.username or parts.password:
        raise InvalidRedisURL("spec.redis.url must not carry credentials; use spec.redis.passwordSecretRef")
    if not parts.hostname:
        raise InvalidRedisURL("spec.redis.url has no host")
    path = parts.path.strip("/")
    if path and not path.isdigit():
        raise InvalidRedisURL(f"spec.redis.url database must be a number, got {path!r}")
    return RedisTarget(host=parts.hostname, port=port, db=int(path or 0),
                       tls=parts.scheme == "rediss" or redis.tls, prefix=prefix,
                       password_ref=redis.password_ref)
