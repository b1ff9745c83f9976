#!/usr/bin/env python3
"""A rolling update during long webhook turns (issue 18: no lost turn), on the `make demo` sandbox.

Uses the exactly-once checker's GatewayDeployment (`make verify-exactly-once` leaves it in namespace
exactly-once). For each turn length (ROLLOUT_TURNS, default "20,200" seconds): a provider delivers
one webhook whose model turn takes that long (the LLM stand-in's delay=) to one replica's pod IP,
the pods are rolled (a podAnnotations change) while it runs, and the provider retries any delivery
that got no 2xx (connection cut), to the Service, every 2 s. The stand-in counts the message's
answered turns: exactly one each time. A turn shorter than spec.drainSeconds (120 s) finishes in the
stopping pod; a longer one is cut when the drain ends, its claim released, and the retry runs it.

    .venv/bin/python hack/rollout-turns.py
"""
from __future__ import annotations

import json
import os
import threading
import time
import uuid

from harness import exactly_once_run as run, node
from harness.cluster import REPO, Cluster
from harness.exactly_once_run import NAME, NAMESPACE


def main() -> int:
    cluster = Cluster(REPO / ".cluster/sandbox/kubeconfig", owned=False, real_node=True)
    token = node.gateway_token(cluster, NAMESPACE, NAME)
    pods = run.Pods(cluster)
    failed = 0
    for seconds in (float(s) for s in os.environ.get("ROLLOUT_TURNS", "20,200").split(",")):
        msg = f"roll-{int(seconds)}-{uuid.uuid4().hex[:6]}"
        text = f"msg={msg} session=rollout delay={seconds:g}"
        answers: list[tuple[float, str, str]] = []
        started = time.time()

        def provider() -> None:
            address = pods.ips[0]
            while True:
                try:
                    answer = node.webhook(address, token, msg, text, timeout=seconds + 200, session="rollout")
                    answers.append((time.time() - started, address, f"HTTP {answer.status} {json.dumps(answer.body)[:80]}"))
                    if 200 <= answer.status < 300:
                        return
                except Exception as e:  # noqa: BLE001 - a cut delivery, as a provider sees it
                    answers.append((time.time() - started, address, type(e).__name__))
                time.sleep(2)
                address = pods.cluster_ip
        thread = threading.Thread(target=provider)
        thread.start()
        time.sleep(3)
        cluster.kubectl("patch", "gatewaydeployment", NAME, "-n", NAMESPACE, "--type", "merge", "-p", json.dumps(
            {"spec": {"podAnnotations": {"exactly-once.test/rollout": uuid.uuid4().hex[:8]}}}))
        print(f"{seconds:g} s turn {msg}: rolling update started at {time.time() - started:.1f}s", flush=True)
        thread.join(timeout=seconds + 600)
        turns = [t for t in run.turns(cluster) if t.msg == msg]
        answered = sum(t.answered for t in turns)
        for at, where, what in answers:
            print(f"  {at:6.1f}s  delivery to {where}: {what}")
        print(f"  turns at the LLM stand-in: {len(turns)} started, {answered} answered "
              f"({'exactly once' if answered == 1 else 'NOT exactly once'})", flush=True)
        failed += answered != 1
    pods.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
