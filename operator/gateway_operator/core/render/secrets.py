"""The Secrets the operator generates once, when absent, and never rotates: the auth token, the
managed Redis password, the shared sessions' key. Their values are drawn by the caller that
creates them (``Generated.manifest``), never rendered into any other object."""
from __future__ import annotations

import base64
import secrets as token_source
from typing import Callable, NamedTuple

from gateway_operator.api import GatewaySpec
from gateway_operator.api.redis_target import managed_redis_name
from gateway_operator.core.render.manifest import Manifest, owned_object
from gateway_operator.core.render.names import Owner, auth_secret_name, session_key_secret_name


def generated_secret(owner: Owner, name: str, key: str, value: str, component: str) -> Manifest:
    """A Secret the operator generates once (auth token, managed Redis password)."""
    return owned_object("v1", "Secret", name, owner, component=component, type="Opaque",
                   stringData={key: value})


class Generated(NamedTuple):
    """A Secret the operator generates once, when it is absent, and never rotates."""

    name: str
    key: str
    component: str
    value: Callable[[], str]  # a fresh random value (an existing Secret keeps its own: create_if_absent)

    def manifest(self, owner: Owner) -> Manifest:
        """The Secret to create when it is absent, with a freshly drawn value."""
        return generated_secret(owner, self.name, self.key, self.value(), self.component)


def generated_secrets(owner: Owner, spec: GatewaySpec) -> list[Generated]:
    """The Secrets this spec needs the operator to generate: the auth token (the gateway refuses a
    non-loopback bind without one), the managed Redis password, the sessions' Fernet key."""
    wanted = []
    if spec.auth_token_ref is None:
        wanted.append(Generated(auth_secret_name(owner.name), "token", "gateway", lambda: token_source.token_urlsafe(48)))
    if spec.redis.managed:
        wanted.append(Generated(managed_redis_name(owner.name), "password", "redis",
                                lambda: token_source.token_urlsafe(32)))
    if spec.sessions_store == "redis" and spec.sessions.key_ref is None:
        wanted.append(Generated(session_key_secret_name(owner.name), "key", "gateway",
                                lambda: base64.urlsafe_b64encode(token_source.token_bytes(32)).decode()))
    return wanted
