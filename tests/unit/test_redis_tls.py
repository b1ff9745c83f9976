"""Your own Redis (issue 20): the operator's probe against a real TLS-only redis-server with ACL
users, on loopback. Each way such a Redis can be misconfigured gives its own RedisReachable reason,
with a message that names the cause and neither the password nor the user name."""
from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from gateway_operator.api import reasons, redis_acl
from gateway_operator.api import SecretKeyRef, TLSOptions
from gateway_operator.api.redis_target import RedisTarget
from gateway_operator.clients.redis_connection import Credentials, KeptConnection
from gateway_operator.clients.redis_guard import Allowlist
from gateway_operator.clients.redis_probe import Prober
from gateway_operator.core import conditions
from gateway_operator.core.probe_result import ProbeResult
from harness.redis_server import RedisServer
from harness.tls import make_ca, server_cert

PASSWORD = "s3cret-pass-word"
USER = "gwop-tenant"
PREFIX = "gwop:t:g:"
# the least-privilege ACL (what the gateway and the probe run), plus what lets the probe read persistence
LEAST = redis_acl.rules(PREFIX, password=PASSWORD)
PROBE_ACL = f"{LEAST} +info +config|get"
NAME = "redis.test.internal"   # the certificate's only name: reached as 127.0.0.1, checked as this


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("pki")
    ca, other = make_ca(root / "ca"), make_ca(root / "other", name="some other CA")
    past = datetime.now(timezone.utc) - timedelta(days=1)
    return {"ca": ca, "other": other,
            "good": server_cert(ca, root / "good", dns=(NAME,), ips=()),
            "expired": server_cert(ca, root / "expired", dns=(NAME,), ips=(), not_after=past)}


@pytest.fixture(scope="module")
def tls_redis(pki: dict):
    server = RedisServer(password="admin-pw", tls=pki["good"], users={USER: PROBE_ACL}).start()
    yield server
    server.close()


def target(port: int, **tls: object) -> RedisTarget:
    options = TLSOptions(**{"ca_ref": SecretKeyRef("redis-ca", "ca.crt"), "server_name": NAME, **tls})
    return RedisTarget("127.0.0.1", port, 0, True, PREFIX, SecretKeyRef("r", "password"),
                       username_ref=SecretKeyRef("r", "username"), tls_options=options)


def probe(t: RedisTarget, credentials: Credentials) -> ProbeResult:
    # the allowlist names the target: its failures keep their detail (an open allowlist collapses
    # them to three outcomes that say nothing of what answered: tests/sim/test_tenancy.py)
    return asyncio.run(Prober(allowlist=Allowlist.parse(["127.0.0.1/32"])).probe("t", t, credentials, 2.0))


def no_secret(result: ProbeResult) -> ProbeResult:
    assert PASSWORD not in result.message and USER not in result.message, result.message
    return result


def test_a_private_ca_and_a_server_name_reached_by_ip_address_pass(tls_redis: RedisServer, pki: dict) -> None:
    result = probe(target(tls_redis.port), Credentials(PASSWORD, USER, pki["ca"].pem))
    assert (result.ok, result.reason) == (True, reasons.PROBE_SUCCEEDED), result.message
    # the ACL user may run INFO and CONFIG GET here, so persistence was read
    assert result.store is not None and result.store.refused == () and result.store.run_id
    assert tls_redis.acl_log() == []


@pytest.mark.parametrize("case", ["wrong CA", "no CA (system CAs)", "wrong server name", "wrong password",
                                  "wrong user", "user lacks SET", "user outside the prefix", "plain TCP client"])
def test_each_misconfiguration_gets_its_own_reason(tls_redis: RedisServer, pki: dict, case: str) -> None:
    good = Credentials(PASSWORD, USER, pki["ca"].pem)
    t = target(tls_redis.port)
    if case == "wrong CA":
        result, reason, words = probe(t, good._replace(ca=pki["other"].pem)), reasons.TLS_CERTIFICATE_UNTRUSTED, \
            "not signed by the CA bundle of spec.redis.tls.caSecretRef"
    elif case == "no CA (system CAs)":
        result, reason, words = probe(t, good._replace(ca=None)), reasons.TLS_CERTIFICATE_UNTRUSTED, \
            "not signed by the system's CAs"
    elif case == "wrong server name":
        result, reason, words = probe(target(tls_redis.port, server_name="redis.elsewhere"), good), \
            reasons.TLS_NAME_MISMATCH, "does not carry the name redis.elsewhere"
    elif case == "wrong password":
        result, reason, words = probe(t, good._replace(password="not-it")), reasons.AUTHENTICATION_FAILED, \
            "did not accept the user of spec.redis.usernameSecretRef"
    elif case == "wrong user":
        result, reason, words = probe(t, good._replace(username="nobody")), reasons.AUTHENTICATION_FAILED, \
            "did not accept the user of spec.redis.usernameSecretRef"
    elif case == "user lacks SET":
        tls_redis.set_user(USER, PROBE_ACL.replace(" +set", ""))
        try:
            result = probe(t, good)
        finally:
            tls_redis.set_user(USER, PROBE_ACL)
        reason, words = reasons.COMMAND_NOT_PERMITTED, "refused SET to the user"
    elif case == "user outside the prefix":
        tls_redis.set_user(USER, PROBE_ACL.replace(f"~{PREFIX}*", "~someone-else:*"))
        try:
            result = probe(t, good)
        finally:
            tls_redis.set_user(USER, PROBE_ACL)
        reason, words = reasons.COMMAND_NOT_PERMITTED, f"refused keys under {PREFIX} to the user"
    else:  # spec.redis without tls against a TLS-only port
        plain = RedisTarget("127.0.0.1", tls_redis.port, 0, False, PREFIX, None)
        result, reason, words = probe(plain, good), reasons.CONNECTION_FAILED, "cannot connect to Redis"
    assert (result.ok, result.reason) == (False, reason), result.message
    assert words in no_secret(result).message


@pytest.mark.parametrize("command", [c for c in redis_acl.COMMANDS if c not in ("set", "get")])
def test_a_user_lacking_any_one_command_of_the_least_privilege_acl_is_told_which(tls_redis: RedisServer, pki: dict,
                                                                                 command: str) -> None:
    """The probe tries every command the gateway needs: without one, the gateway would fail open
    (or lose its shared history, or its claims' release), so scale-out must not go ahead."""
    tls_redis.set_user(USER, LEAST.replace(f" +{command}", ""))
    try:
        result = no_secret(probe(target(tls_redis.port), Credentials(PASSWORD, USER, pki["ca"].pem)))
    finally:
        tls_redis.set_user(USER, PROBE_ACL)
    assert (result.ok, result.reason) == (False, reasons.COMMAND_NOT_PERMITTED), result.message
    assert f"refused {command.upper()} to the user" in result.message
    assert "gateway-operator redis-acl" in result.message


def test_the_least_privilege_acl_alone_passes_and_leaves_the_probe_keys_behind_it_none(
        tls_redis: RedisServer, pki: dict) -> None:
    left = tls_redis.client().keys(f"{PREFIX}operator-probe:*")  # by the cases that refused DEL (10 s TTL)
    if left:
        tls_redis.client().delete(*left)
    tls_redis.set_user(USER, LEAST)
    try:
        result = probe(target(tls_redis.port), Credentials(PASSWORD, USER, pki["ca"].pem))
    finally:
        tls_redis.set_user(USER, PROBE_ACL)
    assert result.ok, result.message
    # INFO and CONFIG GET are not in it: refused, noted, never a failure
    assert result.store is not None and set(result.store.refused) == {"INFO", "CONFIG GET"}
    assert tls_redis.client().keys(f"{PREFIX}operator-probe:*") == []


def test_an_expired_certificate_and_a_server_without_tls(pki: dict) -> None:
    expired = RedisServer(password="admin-pw", tls=pki["expired"], users={USER: PROBE_ACL}).start()
    plain = RedisServer(password="admin-pw", users={USER: PROBE_ACL}).start()
    # a plain-TCP service that speaks first (a banner), as many do: no TLS record comes back
    banner = socket.socket()
    banner.bind(("127.0.0.1", 0))
    banner.listen()

    def greet() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = banner.accept()
                conn.sendall(b"-ERR this port speaks plain RESP\r\n")
                conn.close()

    threading.Thread(target=greet, daemon=True).start()
    try:
        good = Credentials(PASSWORD, USER, pki["ca"].pem)
        result = no_secret(probe(target(expired.port), good))
        assert result.reason == reasons.TLS_CERTIFICATE_EXPIRED and "certificate has expired" in result.message
        result = no_secret(probe(target(banner.getsockname()[1]), good))
        assert result.reason == reasons.TLS_HANDSHAKE_FAILED and "does it serve TLS" in result.message
        # a plain Redis waits for more of the client's hello: the handshake times out, and says so
        result = no_secret(probe(target(plain.port), good))
        assert result.reason == reasons.CONNECTION_FAILED and "no TLS handshake within 2s" in result.message
    finally:
        banner.close()
        expired.close()
        plain.close()


def test_a_service_that_refuses_config_and_info_still_passes_and_says_what_it_did_not_check(pki: dict) -> None:
    managed_like = RedisServer(password="admin-pw", tls=pki["good"], users={USER: PROBE_ACL},
                               renamed=("CONFIG", "INFO")).start()
    try:
        result = probe(target(managed_like.port), Credentials(PASSWORD, USER, pki["ca"].pem))
        assert result.ok and result.store is not None and set(result.store.refused) == {"INFO", "CONFIG GET"}
        # ... and so does an ACL user that may not run them (NOPERM instead of unknown command)
        managed_like.set_user(USER, PROBE_ACL.replace(" +info +config|get", ""))
        result = probe(target(managed_like.port), Credentials(PASSWORD, USER, pki["ca"].pem))
        assert result.ok and result.store is not None and set(result.store.refused) == {"INFO", "CONFIG GET"}
        durable = [c for c in conditions.compute(conditions.Facts(
            1, 2, "redis", "Refuse", False, True, probe=result, target=target(managed_like.port)))
            if c.type == conditions.REDIS_DURABLE][0]
        assert (durable.status, durable.reason) == ("Unknown", reasons.REDIS_CONFIG_NOT_READABLE)
    finally:
        managed_like.close()


def test_insecure_skip_verify_connects_to_any_certificate_and_is_reported(tls_redis: RedisServer,
                                                                           pki: dict) -> None:
    skip = target(tls_redis.port, ca_ref=None, server_name=None, insecure_skip_verify=True)
    result = probe(skip, Credentials(PASSWORD, USER, pki["other"].pem))
    assert result.ok, result.message

    def verified(t: RedisTarget) -> conditions.Condition:
        return [c for c in conditions.compute(conditions.Facts(1, 2, "redis", "Refuse", False, True, probe=result,
                                                                target=t))
                if c.type == conditions.REDIS_TLS_VERIFIED][0]

    assert (verified(skip).status, verified(skip).reason) == ("False", reasons.TLS_VERIFICATION_DISABLED)
    checked = verified(target(tls_redis.port))
    assert (checked.status, checked.reason) == ("True", reasons.SERVER_CERTIFICATE_VERIFIED)
    assert "Secret 'redis-ca'" in checked.message and NAME in checked.message
    plain = verified(RedisTarget("r", 6379, 0, False, PREFIX, None))
    assert (plain.status, plain.reason) == ("Unknown", reasons.TLS_NOT_USED)


def test_a_ca_secret_that_holds_no_certificate_is_named(tmp_path: Path, pki: dict) -> None:
    from gateway_operator.clients.redis_connection import ca_bundle_loads
    assert ca_bundle_loads(pki["ca"].pem)
    assert not ca_bundle_loads("not a certificate")
    assert not ca_bundle_loads("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")


def test_under_the_open_allowlist_the_same_failures_say_nothing_of_what_answered(tls_redis: RedisServer,
                                                                                 pki: dict) -> None:
    """The chart's default (redisProbe.allow: []): a target the operator may not privilege is told
    in fixed words (tests/sim/test_tenancy.py), pointing at the allowlist that would explain it."""
    from gateway_operator.core import probe_wording
    wrong_ca = asyncio.run(Prober().probe("t", target(tls_redis.port), Credentials(PASSWORD, USER, pki["other"].pem),
                                          2.0))
    assert wrong_ca == probe_wording.unusable(f"127.0.0.1:{tls_redis.port}/0")
    assert "redisProbe.allow" in wrong_ca.message


def test_a_refusal_names_the_default_user_when_no_acl_user_is_configured() -> None:
    """A Redis whose default user is restricted, signed in with a password alone."""
    from gateway_operator.core import probe_wording
    alone = probe_wording.not_permitted("r:6379/0", ["EVAL"], named_user=False)
    assert "refused EVAL to the default user" in alone.message and "usernameSecretRef" not in alone.message
    named = probe_wording.not_permitted("r:6379/0", ["EVAL"], named_user=True)
    assert "to the user of spec.redis.usernameSecretRef" in named.message and USER not in named.message


@pytest.mark.parametrize("acl", ["least privilege", "with INFO"])
def test_observation_probes_over_tls_with_an_acl_user_keep_one_connection_and_the_full_probes_facts(
        tls_redis: RedisServer, pki: dict, acl: str) -> None:
    """Between full probes the observation probe keeps its own minimal connection (resp.py): TLS
    verified against the spec's CA and server name, signed in as the ACL user. It reads what the
    full probe read (the run_id only where INFO is allowed) and the server refuses it nothing."""
    tls_redis.set_user(USER, LEAST if acl == "least privilege" else PROBE_ACL)
    credentials = Credentials(PASSWORD, USER, pki["ca"].pem)

    async def run() -> list[ProbeResult | None]:
        prober, kept = Prober(allowlist=Allowlist.parse(["127.0.0.1/32"])), KeptConnection()
        full = await prober.probe("t", target(tls_redis.port), credentials, 2.0, kept=kept)
        assert full is not None and full.ok, full
        tls_redis.client().acl_log_reset()   # what the full probe tried and was refused (INFO, CONFIG GET)
        results: list[ProbeResult | None] = [full]
        for _ in range(3):
            results.append(await prober.probe("t", target(tls_redis.port), credentials, 2.0, kept=kept,
                                              base=full.store))
        clients = [c for c in tls_redis.client().client_list() if c.get("user") == USER]
        await kept.aclose()
        assert len(clients) == 1, clients   # the three observations' one connection
        return results

    try:
        full, *observed = asyncio.run(run())
    finally:
        tls_redis.set_user(USER, PROBE_ACL)
    assert full is not None and full.store is not None
    for result in observed:
        assert result is not None and result.ok and result.store is not None, result
        assert (result.store.run_id, result.store.canary, result.store.refused) == \
            (full.store.run_id, full.store.canary, full.store.refused)
    assert (full.store.run_id is None) == (acl == "least privilege")
    assert tls_redis.acl_log() == []
