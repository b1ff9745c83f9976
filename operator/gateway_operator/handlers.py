"""kopf wiring, kept thin: watch events feed the Supervisor; the work happens in
controller/reconcile/render."""
from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import kopf

from . import api, reasons
from .controller import ControllerSettings
from .kube import Kube, load_config
from .reconcile import LiveDeployment, Observed, PodView, live_deployment
from .supervisor import Supervisor

OWNED = {api.LABEL_MANAGED_BY: api.MANAGED_BY}
WAITING_MESSAGE_LIMIT = 300  # characters of a kubelet waiting message kept per pod
_pod_index: Any = None  # kopf's live index of gateway pods, captured on first use
_deployment_index: Any = None  # and of gateway Deployments


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    settings.posting.level = logging.INFO   # only the Events the operator posts on purpose
    settings.posting.reporting_component = "gateway-operator"  # "From" in kubectl describe
    settings.watching.server_timeout = 270   # re-list before most load balancers cut the watch
    settings.watching.client_timeout = 300   # a watch request never hangs for ever
    # API calls run in threads: enough of them that a slow API server for one object does
    # not queue every other namespace behind it (the Redis probe holds no thread at all)
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=16,
                                                                       thread_name_prefix="kube"))
    kube = Kube(load_config(memo.get("kubeconfig")))
    memo.supervisor = Supervisor(kube, memo.get("controller_settings") or ControllerSettings(), _pods_of,
                                 _deployment_of)


def _pods_of(key: tuple[str, str]) -> list[PodView]:
    return list(_pod_index.get(key, [])) if _pod_index is not None else []


def _deployment_of(key: tuple[str, str]) -> LiveDeployment | None:
    """None until the index is known: the controller then reads the Deployment itself."""
    if _deployment_index is None:
        return None
    found = list(_deployment_index.get(key, []))
    return found[0] if found else LiveDeployment(None, Observed())  # none: nothing of ours runs


@kopf.on.cleanup()
async def shutdown(memo: kopf.Memo, **_: Any) -> None:
    if "supervisor" in memo:
        await memo.supervisor.stop_all()


@kopf.index("", "v1", "pods", labels={**OWNED, api.LABEL_COMPONENT: "gateway"})
def gateway_pods(namespace: str, name: str, uid: str, labels: Any, status: Any, meta: Any,
                 **_: Any) -> dict[tuple[str, str], PodView]:
    return {(namespace, labels.get(api.LABEL_INSTANCE, "")): pod_view(name, uid, meta, status)}


@kopf.index("apps", "v1", "deployments", labels={**OWNED, api.LABEL_COMPONENT: "gateway"})
def gateway_deployments(namespace: str, name: str, body: kopf.Body,
                        **_: Any) -> dict[tuple[str, str], LiveDeployment]:
    return {(namespace, name): live_deployment(body)}


def pod_view(name: str, uid: str, meta: Any, status: Any) -> PodView:
    conditions = status.get("conditions") or []
    containers = status.get("containerStatuses") or []
    state = next((c["state"]["waiting"] for c in containers if (c.get("state") or {}).get("waiting")), {})
    waiting = state.get("reason")
    # the kubelet's words for an image or config problem (stable across retries, unlike a
    # crash loop's back-off countdown, so the status is not rewritten on every retry)
    message = str(state.get("message") or "")[:WAITING_MESSAGE_LIMIT] if waiting in reasons.POD_WAITING else ""
    last_exit = next((c["lastState"]["terminated"].get("exitCode") for c in containers
                      if (c.get("lastState") or {}).get("terminated")), None)
    return PodView(name=name, uid=uid, ip=status.get("podIP"),
                   ready=any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions),
                   deleting=bool(meta.get("deletionTimestamp")), waiting_reason=waiting,
                   waiting_message=message, last_exit_code=last_exit)


@kopf.on.event(api.GROUP, api.VERSION, api.PLURAL)
async def gateway_deployment_changed(type: str | None, body: kopf.Body, memo: kopf.Memo,
                                     gateway_pods: kopf.Index, gateway_deployments: kopf.Index,
                                     **_: Any) -> None:
    global _pod_index, _deployment_index
    _pod_index, _deployment_index = gateway_pods, gateway_deployments
    memo.supervisor.observe(type, body)


@kopf.on.event("", "v1", "pods", labels={**OWNED, api.LABEL_COMPONENT: "gateway"})
@kopf.on.event("apps", "v1", "deployments", labels=OWNED)
@kopf.on.event("", "v1", "configmaps", labels=OWNED)
@kopf.on.event("", "v1", "services", labels=OWNED)
async def owned_object_changed(namespace: str, labels: Any, memo: kopf.Memo, **_: Any) -> None:
    """Drift or progress of something the operator owns: reconcile its gateway soon."""
    if "supervisor" in memo:
        memo.supervisor.nudge(namespace, labels.get(api.LABEL_INSTANCE))
