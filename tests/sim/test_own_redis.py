"""Your own Redis (issue 20), end to end through the operator: a TLS-only redis-server with a
private CA, reached by IP address with tls.serverName, signed in as the least-privilege ACL user.
Each way it can go wrong is broken once, and the condition it gives is timed from the change.

Real parts: the control plane, the operator CLI under the chart's RBAC with ``--redis-allow`` naming
the Redis (as a platform team names its own: the probe's failures then keep their detail; an open
allowlist collapses them, tests/sim/test_tenancy.py), redis-server with TLS and ACL users. Its pods run
on the SIMULATED node (nothing here needs a gateway to run: test_launcher_real_gateway.py runs the
real gateway against the same Redis, test_node.py on the real node). Its own control plane: the
operator here runs with flags the session's operator does not."""
from __future__ import annotations

import base64
import json
import time
from datetime import datetime, timedelta, timezone
from typing import Callable, Iterator

import pytest
import yaml

from gateway_operator import api
from gateway_operator.api import reasons, redis_acl
from harness.cluster import Cluster
from harness.gateways import apply_gateway, conditions, events, wait_condition, wait_event
from harness.operator import OperatorProcess, gateway_deployment, redis_store
from harness.redis_server import RedisServer
from harness.tls import make_ca, server_cert


NAME = "redis.own.internal"   # the only name the server's certificate carries
PASSWORD = "own-redis-pass-8c1f"
USER = "gwop-own"
GATEWAY = "own"


@pytest.fixture(scope="module")
def world(own_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    root = tmp_path_factory.mktemp("own-redis")
    ca, other = make_ca(root / "ca"), make_ca(root / "other", name="another CA")
    good = server_cert(ca, root / "good", dns=(NAME,), ips=())
    expired = server_cert(ca, root / "expired", dns=(NAME,), ips=(),
                          not_after=datetime.now(timezone.utc) - timedelta(hours=1))
    operator = OperatorProcess(own_cluster, extra_args=["--redis-allow=127.0.0.1/32"]).start()
    namespace = own_cluster.new_namespace()
    prefix = api.default_prefix(namespace, GATEWAY)
    server = RedisServer(password="admin-only", tls=good, users={USER: redis_acl.rules(prefix, password=PASSWORD)})
    server.start()
    try:
        yield {"cluster": own_cluster, "operator": operator, "namespace": namespace, "server": server, "ca": ca,
               "other": other, "good": good, "expired": expired, "prefix": prefix}
    finally:
        server.close()
        operator.stop()


def secret(cluster: Cluster, namespace: str, name: str, **data: str) -> None:
    body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}
    cluster.apply(json.dumps(body))


def own_gateway(port: int, **tls: object) -> dict:
    return gateway_deployment(GATEWAY, replicas=2, config=redis_store(), redis={
        "host": "127.0.0.1", "port": port, "passwordSecretRef": {"name": "redis-login"},
        "usernameSecretRef": {"name": "redis-login"},
        "tls": {"enabled": True, "caSecretRef": {"name": "redis-ca"}, "serverName": NAME, **tls}})


def seen_by_anyone(w: dict) -> str:
    c, ns = w["cluster"], w["namespace"]
    return json.dumps([c.get_json("-n", ns, f"configmap/{GATEWAY}-gateway-config"),
                       c.get_json("-n", ns, f"gatewaydeployment/{GATEWAY}").get("status"),
                       events(c, ns, GATEWAY)]) + w["operator"].log_text() + w["operator"].metrics()


def test_a_tls_redis_with_a_private_ca_and_an_acl_user_is_verified_and_every_failure_named(world: dict) -> None:
    w, c, ns, server = world, world["cluster"], world["namespace"], world["server"]
    secret(c, ns, "redis-login", username=USER, password=PASSWORD)
    secret(c, ns, "redis-ca", **{"ca.crt": w["ca"].pem})
    apply_gateway(c, ns, own_gateway(server.port))
    ok = wait_condition(c, ns, GATEWAY, "RedisReachable", "True", reasons.PROBE_SUCCEEDED, timeout=60)
    verified = wait_condition(c, ns, GATEWAY, "RedisTLSVerified", "True", reasons.SERVER_CERTIFICATE_VERIFIED)
    assert "Secret 'redis-ca'" in verified["message"] and NAME in verified["message"]
    # the least-privilege user may not run INFO or CONFIG GET (a managed service's refusals): not checked,
    # said so, and never a failure
    durable = conditions(c, ns, GATEWAY)["RedisDurable"]
    assert (durable["status"], durable["reason"]) == ("Unknown", reasons.REDIS_CONFIG_NOT_READABLE), durable
    deployment = c.get_json("-n", ns, f"deployment/{GATEWAY}")
    assert deployment["spec"]["replicas"] == 2  # the scale-out gate opened on the probe
    pod = deployment["spec"]["template"]["spec"]
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env[api.REDIS_USERNAME_ENV]["valueFrom"]["secretKeyRef"] == {"name": "redis-login", "key": "username"}
    assert {"name": "redis-ca", "mountPath": api.REDIS_CA_DIR, "readOnly": True} in pod["containers"][0]["volumeMounts"]
    config = yaml.safe_load(c.get_json("-n", ns, f"configmap/{GATEWAY}-gateway-config")["data"]["gateway.yaml"])
    assert config["push"]["redis"]["tls_server_name"] == NAME
    assert ok["message"].startswith("Redis at 127.0.0.1:")

    restore_login = lambda: secret(c, ns, "redis-login", username=USER, password=PASSWORD)  # noqa: E731
    least = redis_acl.rules(w["prefix"], password=PASSWORD)
    cases: list[tuple[str, Callable[[], None], Callable[[], None], str, str, str]] = [
        ("CA Secret holds another CA", lambda: secret(c, ns, "redis-ca", **{"ca.crt": w["other"].pem}),
         lambda: secret(c, ns, "redis-ca", **{"ca.crt": w["ca"].pem}),
         "RedisReachable", reasons.TLS_CERTIFICATE_UNTRUSTED, "not signed by the CA bundle of spec.redis.tls.caSecretRef"),
        ("tls.serverName not on the certificate",
         lambda: apply_gateway(c, ns, own_gateway(server.port, serverName="redis.elsewhere.internal")),
         lambda: apply_gateway(c, ns, own_gateway(server.port)),
         "RedisReachable", reasons.TLS_NAME_MISMATCH, "does not carry the name redis.elsewhere.internal"),
        ("server certificate expired", lambda: server.use_certificate(w["expired"]),
         lambda: server.use_certificate(w["good"]),
         "RedisReachable", reasons.TLS_CERTIFICATE_EXPIRED, "certificate has expired"),
        ("wrong password", lambda: secret(c, ns, "redis-login", username=USER, password="not-the-password"),
         restore_login, "RedisReachable", reasons.AUTHENTICATION_FAILED,
         "did not accept the user of spec.redis.usernameSecretRef"),
        ("wrong user", lambda: secret(c, ns, "redis-login", username="nobody", password=PASSWORD),
         restore_login, "RedisReachable", reasons.AUTHENTICATION_FAILED,
         "did not accept the user of spec.redis.usernameSecretRef"),
        ("ACL user lacks EVAL", lambda: server.set_user(USER, least.replace(" +eval", "")),
         lambda: server.set_user(USER, least),
         "RedisReachable", reasons.COMMAND_NOT_PERMITTED, "refused EVAL to the user"),
        ("CA Secret holds no certificate", lambda: secret(c, ns, "redis-ca", **{"ca.crt": "not a PEM"}),
         lambda: secret(c, ns, "redis-ca", **{"ca.crt": w["ca"].pem}),
         "Stalled", reasons.SECRET_VALUE_INVALID, "holds no PEM certificate"),
    ]
    table = []
    for case, break_it, fix_it, type_, reason, words in cases:
        started = time.monotonic()
        break_it()
        status = "True" if type_ == "Stalled" else "False"
        seen = wait_condition(c, ns, GATEWAY, type_, status, reason, timeout=60)
        took = time.monotonic() - started
        assert words in seen["message"], (case, seen)
        assert PASSWORD not in seen["message"] and USER not in seen["message"], seen
        table.append({"case": case, "condition": f"{type_}={status}", "reason": reason,
                      "message": seen["message"], "seconds": round(took, 1)})
        fix_it()
        wait_condition(c, ns, GATEWAY, "RedisReachable", "True", reasons.PROBE_SUCCEEDED, timeout=60)
        wait_condition(c, ns, GATEWAY, "Stalled", "False", timeout=60)
    print("\n" + json.dumps(table, indent=1))
    # a Secret the pods read is noticed within one full reconcile (resync 5 s here), a spec change at once
    assert all(row["seconds"] < 20 for row in table), table
    wait_event(c, ns, GATEWAY, "RedisUnreachable", "Warning")
    seen = seen_by_anyone(w)
    assert PASSWORD not in seen and "not-the-password" not in seen and w["ca"].pem.splitlines()[1] not in seen
    assert USER not in seen and "nobody" not in seen  # the user name's Secret is a Secret too


def test_insecure_skip_verify_is_a_warning_condition_and_event_never_silent(world: dict) -> None:
    w, c, ns, server = world, world["cluster"], world["namespace"], world["server"]
    secret(c, ns, "redis-login", username=USER, password=PASSWORD)
    secret(c, ns, "redis-ca", **{"ca.crt": w["other"].pem})  # would not verify: nothing is checked now
    body = own_gateway(server.port)
    body["spec"]["redis"]["tls"] = {"enabled": True, "insecureSkipVerify": True}
    apply_gateway(c, ns, body)
    warned = wait_condition(c, ns, GATEWAY, "RedisTLSVerified", "False", reasons.TLS_VERIFICATION_DISABLED)
    assert "insecureSkipVerify" in warned["message"]
    wait_condition(c, ns, GATEWAY, "RedisReachable", "True", reasons.PROBE_SUCCEEDED)
    wait_event(c, ns, GATEWAY, reasons.TLS_VERIFICATION_DISABLED, "Warning")
    config = yaml.safe_load(c.get_json("-n", ns, f"configmap/{GATEWAY}-gateway-config")["data"]["gateway.yaml"])
    assert config["push"]["redis"]["url"].endswith("&ssl_cert_reqs=none")
    apply_gateway(c, ns, own_gateway(server.port))  # back to a checked connection
    secret(c, ns, "redis-ca", **{"ca.crt": w["ca"].pem})
    wait_condition(c, ns, GATEWAY, "RedisTLSVerified", "True", reasons.SERVER_CERTIFICATE_VERIFIED)
    wait_condition(c, ns, GATEWAY, "RedisReachable", "True", reasons.PROBE_SUCCEEDED)
