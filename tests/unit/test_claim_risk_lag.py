"""How long after a replica holding claims is paused (SIGSTOP) its GatewayDeployment says
``ExactlyOnceAdmission=False ClaimsAtRisk``, through the health watch and through polls only, with
the default health timing (interval 10 s, timeout 2 s), and that it says True again once the replica
answers with its claims renewed (SIGCONT).

The replica is a real process: the launcher's own watch server (pod/gwop_watch.py, the code the pods
run) on WATCH_PORT and a /health on GATEWAY_PORT over a HEALTH BODY STAND-IN that holds one claim
(the section the lead's launcher writes). Pausing it stops both, as a SIGSTOP does to a pod: the
kernel still accepts connections, nothing answers. The loop, the watch, the poll and the status are
the operator's (controller.py with test_controller's API STAND-IN)."""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time

import kopf
from kopf._core.engines import posting

from gateway_operator.api import GATEWAY_PORT, WATCH_PORT
from gateway_operator.api import reasons as R
from gateway_operator.core import conditions as C
from gateway_operator.core.pods import PodView
from gateway_operator.core.settings import ControllerSettings
from gateway_operator.loop.controller import GatewayController

from harness.pod_code import POD_CODE
from harness.wait import until_async as until
from test_controller import HangingProber, HeldApi
from test_loop import REDIS_SPEC, gateway, secret

REPLICA = textwrap.dedent('''
    import asyncio, json, sys
    sys.path.insert(0, sys.argv[1])
    import gwop_watch

    ip, gateway_port, watch_port = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

    def body():
        return {"status": "healthy", "degraded_owners": [], "gateway_operator": {"idempotency": {
            "redis": "answers", "answers_for_s": 60.0, "claims_held": 1, "claims_unrenewed": 0,
            "claims_expire_in_s": 50.0, "renew_failing_for_s": 0.0, "fenced": 0, "claim_lease_s": 60.0,
            "leases_lost": 0, "journalled": 0}}}

    async def health(reader, writer):
        try:
            while True:
                await reader.readuntil(b"\\r\\n\\r\\n")
                data = json.dumps(body()).encode()
                writer.write(b"HTTP/1.1 200 OK\\r\\nContent-Type: application/json\\r\\nContent-Length: %d\\r\\n\\r\\n%s"
                             % (len(data), data))
                await writer.drain()
        except Exception:
            writer.close()

    async def main():
        watched = gwop_watch.Watched(body)
        server = gwop_watch.WatchServer()
        await server.listen(ip, watch_port, watched)
        await asyncio.start_server(health, ip, gateway_port)
        print("ready", flush=True)
        await watched.tick()

    asyncio.run(main())
''')


def lag_to_claims_at_risk(ip: str, watch: bool) -> tuple[float, float]:
    """(seconds from the pause to ClaimsAtRisk in status, seconds from the resume to True)."""
    replica = subprocess.Popen([sys.executable, "-c", REPLICA, str(POD_CODE), ip, str(GATEWAY_PORT), str(WATCH_PORT)],
                               stdout=subprocess.PIPE, text=True)
    try:
        assert replica.stdout is not None and replica.stdout.readline().strip() == "ready"
        body = gateway({**REDIS_SPEC, "replicas": 1, "health": {"intervalSeconds": 10, "timeoutSeconds": 2}})
        kube = HeldApi(body, [secret("redis-auth", password="pw")])
        pods = [PodView("bot-0", "uid-0", ip, ready=True, deleting=False)]
        result: dict[str, float] = {}

        async def main() -> None:
            posting.event_queue_loop_var.set(asyncio.get_running_loop())
            posting.event_queue_var.set(asyncio.Queue())
            posting.settings_var.set(kopf.OperatorSettings())
            controller = GatewayController(kube, "ns", "bot", lambda: pods, prober=HangingProber(0),  # type: ignore[arg-type]
                                           settings=ControllerSettings(health_watch=watch))
            controller.update(kube.body)
            task = asyncio.create_task(controller.run())
            try:
                said = lambda: (kube.condition(C.EXACTLY_ONCE).get("status"),  # noqa: E731
                                kube.condition(C.EXACTLY_ONCE).get("reason"))
                await until(lambda: said() == ("True", R.SHARED_REDIS_STORE), 20, "exactly-once held, one claim held")
                if watch:
                    await until(lambda: controller.watch is not None and controller.watch.watching == 1, 10,
                                "the watch answers")
                await asyncio.sleep(3.0)   # a while into the cadence, not at a fresh answer
                os.kill(replica.pid, signal.SIGSTOP)
                paused = time.monotonic()
                await until(lambda: said() == ("False", R.CLAIMS_AT_RISK), 30, "ClaimsAtRisk after the pause")
                result["paused"] = time.monotonic() - paused
                assert "bot-0 held 1 claims at its last answer" in kube.condition(C.EXACTLY_ONCE)["message"]
                await asyncio.sleep(4.0)   # it lasts while the risk does
                assert said() == ("False", R.CLAIMS_AT_RISK)
                os.kill(replica.pid, signal.SIGCONT)
                resumed = time.monotonic()
                await until(lambda: said() == ("True", R.SHARED_REDIS_STORE), 30, "True once it answers again")
                result["resumed"] = time.monotonic() - resumed
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

        asyncio.run(main())
        return result["paused"], result["resumed"]
    finally:
        os.kill(replica.pid, signal.SIGCONT)
        replica.kill()
        replica.wait(10)


def test_a_paused_holder_is_announced_within_ten_seconds_through_the_watch() -> None:
    paused, resumed = lag_to_claims_at_risk("127.61.0.21", watch=True)
    print(f"watch: ClaimsAtRisk {paused:.2f} s after the pause, True {resumed:.2f} s after the resume")
    assert paused <= 10.0, paused


def test_a_paused_holder_is_announced_within_ten_seconds_through_polls() -> None:
    paused, resumed = lag_to_claims_at_risk("127.61.0.22", watch=False)
    print(f"polls: ClaimsAtRisk {paused:.2f} s after the pause, True {resumed:.2f} s after the resume")
    assert paused <= 10.0, paused
