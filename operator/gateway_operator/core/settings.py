"""The operator-wide settings a GatewayDeployment's loop and pass read (the flags and chart values
of ``gateway-operator run``): low in the layering, so that every reader types them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from gateway_operator.api.tenancy import TenancyPolicy
from gateway_operator.core.render.names import OperatorIdentity
from gateway_operator.core.rollouts import DEFAULT_LIMIT
from gateway_operator.core.schedule import Timing
from gateway_operator.core.shards import Timing as ShardTiming


@dataclass(frozen=True)
class ReconcileSettings:
    timing: Timing = field(default_factory=Timing)     # the resync and the backoff (schedule.py)
    operator: OperatorIdentity = field(default_factory=OperatorIdentity)
    tenancy: TenancyPolicy = field(default_factory=TenancyPolicy)  # the administrator's (chart values tenancy)
    # the pods' launcher and its modules by file name, shipped in each ConfigMap: read once at start by
    # ``gateway-operator run`` (gateway_operator.pod.pod_code), an input here as the core reads no file
    pod_code: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ControllerSettings:
    reconcile: ReconcileSettings = field(default_factory=ReconcileSettings)  # timing, identity, tenancy
    redis_allow: tuple[str, ...] = ()        # the probe's allowlist (CIDRs, hosts, .domains); empty: open
    max_concurrent_rollouts: int = DEFAULT_LIMIT  # operator-caused rollouts at a time; 0: no cap
    health_watch: bool = True   # each replica's launcher long-poll /health (health_watch.py); False: polls only


@dataclass(frozen=True)
class ShardSettings:
    """``--shards``: every replica reconciles the GatewayDeployments of the shards it holds."""
    shards: int                 # 1..shards.MAX_SHARDS
    identity: str               # this process's name in the Leases (unique per process)
    namespace: str              # where the Leases live (the operator's namespace)
    group: str                  # the Leases' name prefix and group label (the release)
    timing: ShardTiming = field(default_factory=ShardTiming)
