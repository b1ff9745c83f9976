"""Leader election on a ``coordination.k8s.io`` Lease, so that two operator replicas can run
and only one of them ever writes.

kopf's peering only pauses operators that see each other; it is not leader election. Here
the candidate blocks before kopf starts: the elector (the ``kubernetes`` client's
LeaderElection with a LeaseLock, as client-go's) runs in a thread; when it acquires the
Lease the process starts kopf; when it cannot renew it before the renew deadline, the
process exits at once (as controller-runtime's managers do) and Kubernetes restarts it as a
standby. A standby answers its liveness probe but watches and writes nothing.
"""
from __future__ import annotations

import logging
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, NamedTuple, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

log = logging.getLogger(__name__)


class ElectionSettings(NamedTuple):
    lease_name: str
    namespace: str
    identity: str
    lease_duration: int = 15   # a standby takes over this long after the leader's last renewal
    renew_deadline: int = 10   # the leader gives up (and exits) after failing to renew this long
    retry_period: int = 2


def default_identity() -> str:
    """The pod's name (unique per replica), else host and pid."""
    return os.environ.get("POD_NAME") or f"{os.uname().nodename}-{os.getpid()}"


class _BoundedLeases:
    """The Lease calls with a timeout, and a connection failure (an API server restarting)
    raised as an API error: the client's LeaseLock catches only those, and its elector thread
    would otherwise die and leave a leader that no longer renews."""

    def __init__(self, timeout: tuple[float, float]) -> None:
        self._api, self._timeout = client.CoordinationV1Api(), timeout

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._api, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return method(*args, _request_timeout=self._timeout, **kwargs)
            except ApiException:
                raise
            except Exception as e:  # noqa: BLE001 - urllib3/OS errors: retried by the elector
                raise ApiException(status=0, reason=f"{type(e).__name__}: the API server did not answer") from None
        return call


def _lease_lock(settings: ElectionSettings) -> LeaseLock:
    lock = LeaseLock(settings.lease_name, settings.namespace, settings.identity)
    # cast: LeaseLock calls its CoordinationV1Api's lease methods only, which _BoundedLeases forwards
    lock.api_instance = cast(client.CoordinationV1Api, _BoundedLeases((2.0, max(1.0, settings.renew_deadline / 2))))
    return lock


def _exit_when_done(elector: threading.Thread, lost: Callable[[], None]) -> None:
    elector.join()
    lost()


class _StandbyLiveness:
    """/healthz while waiting for the Lease: a standby is alive, just not leading."""

    def __init__(self, host: str, port: int) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                body = b'{"standby": true}'
                self.send_response(200 if self.path == "/healthz" else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((host, port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True, name="standby-liveness").start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def give_up(settings: ElectionSettings) -> None:
    """Release the Lease if this process holds it (holderIdentity cleared): a standby takes over
    at its next retry, not a lease duration later. The caller exits right after, before its own
    elector renews."""
    leases = _BoundedLeases((2.0, 5.0))
    lease = leases.read_namespaced_lease(settings.lease_name, settings.namespace)
    if lease.spec is not None and lease.spec.holder_identity == settings.identity:
        lease.spec.holder_identity = None  # an update (the RBAC the elector has), checked by resourceVersion
        leases.replace_namespaced_lease(settings.lease_name, settings.namespace, lease)
        log.info("gave up the Lease %s/%s", settings.namespace, settings.lease_name)


def wait_for_leadership(settings: ElectionSettings, liveness: tuple[str, int] | None) -> None:
    """Block until this process holds the Lease; keep renewing it in a thread; exit the
    process the moment it is lost."""
    logging.getLogger("leaderelection").setLevel(logging.WARNING)  # it logs every retry at INFO
    leading = threading.Event()
    standby = _StandbyLiveness(*liveness) if liveness else None
    log.info("waiting to lead (Lease %s/%s, identity %s)", settings.namespace, settings.lease_name,
             settings.identity)

    def lost() -> None:
        log.error("lost the Lease %s/%s; exiting so that only the new leader writes", settings.namespace,
                  settings.lease_name)
        logging.shutdown()
        os._exit(1)  # no cleanup that could still write: the successor owns the objects now

    config = electionconfig.Config(
        _lease_lock(settings),
        lease_duration=settings.lease_duration, renew_deadline=settings.renew_deadline,
        retry_period=settings.retry_period, onstarted_leading=leading.set, onstopped_leading=lost)
    elector = threading.Thread(target=leaderelection.LeaderElection(config).run, daemon=True,
                               name="leader-election")
    elector.start()
    leading.wait()
    # whatever ends the elector's thread ends the renewals: then this process must not lead on
    threading.Thread(target=_exit_when_done, args=(elector, lost), daemon=True, name="leader-watchdog").start()
    if standby is not None:
        standby.close()  # kopf serves /healthz from here on
    log.info("leading (Lease %s/%s)", settings.namespace, settings.lease_name)
