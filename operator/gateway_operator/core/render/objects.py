"""Everything one GatewayDeployment needs, in apply order: the render's one entry point."""
from __future__ import annotations

from typing import Mapping

from gateway_operator.api import GatewaySpec
from gateway_operator.api.redis_target import RedisTarget
from gateway_operator.core.render.autoscaling import autoscaler, disruption_budget, pod_monitor
from gateway_operator.core.render.deployment import deployment, state_claim
from gateway_operator.core.render.gateway_config import config_hash, config_map
from gateway_operator.core.render.managed_redis import managed_redis
from gateway_operator.core.render.manifest import Manifest
from gateway_operator.core.render.names import OperatorIdentity, Owner
from gateway_operator.core.render.network import gateway_network_policy, http_route, ingress, service


def desired_objects(owner: Owner, spec: GatewaySpec, redis: RedisTarget | None, replicas: int,
                    secrets_revision: str = "", operator: OperatorIdentity = OperatorIdentity(),
                    migration: str = "", *, pod_code: Mapping[str, str]) -> list[Manifest]:
    """Everything the gateway needs, in apply order (config before the pods that mount it).
    ``pod_code``: the pods' launcher and its modules by file name, as the caller read them once
    (``gateway_operator.pod.pod_code``)."""
    cm = config_map(owner, spec, redis, pod_code)
    objects = [cm]
    claim = state_claim(owner, spec)
    if claim:
        objects.append(claim)
    objects += managed_redis(owner, spec, operator)
    objects.append(deployment(owner, spec, redis, replicas, config_hash(cm), secrets_revision, migration))
    objects.append(service(owner, spec))
    pdb = disruption_budget(owner, spec)
    if pdb:
        objects.append(pdb)
    policy = gateway_network_policy(owner, spec, operator)
    if policy:
        objects.append(policy)
    # after the Deployment: the HPA's target (this GatewayDeployment) exists already; the scrape the
    # autoscaler's metric comes from
    objects += [m for m in (autoscaler(owner, spec), pod_monitor(owner, spec)) if m]
    # last: a route to the replicas (or an API that is not served) never holds them back
    objects += [m for m in (ingress(owner, spec), http_route(owner, spec)) if m]
    return objects
