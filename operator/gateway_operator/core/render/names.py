"""Who owns what is rendered (``Owner``), where the operator itself runs (``OperatorIdentity``),
and the names of the objects and Secrets a GatewayDeployment's objects refer to each other by."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway_operator import api
from gateway_operator.api import GatewaySpec, SecretKeyRef
from gateway_operator.api.redis_target import managed_redis_name

OPERATOR_APP_NAME = "gateway-operator"  # app.kubernetes.io/name of the chart's operator pod


@dataclass(frozen=True)
class OperatorIdentity:
    """Where the operator's own pods run (the chart's release), so that a managed Redis
    admits the operator's probe and nobody else's pods; and the image a managed Redis runs
    when its spec names none."""

    namespace: str = "gateway-operator"
    instance: str = "gateway-operator"   # app.kubernetes.io/instance: the Helm release name
    managed_redis_image: str = api.DEFAULT_MANAGED_REDIS_IMAGE


@dataclass(frozen=True)
class Owner:
    """The GatewayDeployment that owns everything rendered (for ownerReferences)."""

    name: str
    namespace: str
    uid: str

    def reference(self) -> dict[str, Any]:
        return {"apiVersion": api.API_VERSION, "kind": api.KIND, "name": self.name, "uid": self.uid,
                "controller": True, "blockOwnerDeletion": True}


def auth_secret_name(name: str) -> str:
    return f"{name}-gateway-auth"


def session_key_secret_name(name: str) -> str:
    return f"{name}-session-key"


def session_key_ref(name: str, spec: GatewaySpec) -> SecretKeyRef | None:
    """The Secret holding the session history's encryption key (shared sessions only)."""
    if spec.sessions_store != "redis":
        return None
    return spec.sessions.key_ref or SecretKeyRef(session_key_secret_name(name), "key")


def config_map_name(name: str) -> str:
    return f"{name}-gateway-config"


def state_claim_name(name: str) -> str:
    return f"{name}-gateway-state"


def auth_token_ref(name: str, spec: GatewaySpec) -> SecretKeyRef:
    """The user's token Secret, or the one the operator generates."""
    return spec.auth_token_ref or SecretKeyRef(auth_secret_name(name), "token")


def gateway_network_policy_name(name: str) -> str:
    return f"{name}-gateway"


def redis_data_claim_name(name: str) -> str:
    return f"{managed_redis_name(name)}-data"
