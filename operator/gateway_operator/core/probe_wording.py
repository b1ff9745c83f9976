"""What the operator's Redis probe says: every message of a RedisReachable result, as text and
a reason, and nothing else.

Pure (no I/O, no exception is looked at here): the probe (clients/redis_probe.py and the
modules it is made of) decides which outcome it met and hands over plain values (where,
for how long, which commands, whether an ACL user or a CA bundle was configured); these
say it. A message never holds the password, and never the user's name: a refusal says
which Secret the user came from, not who it is.

``where`` is the target as status names it (``RedisTarget.endpoint``), whatever address was
connected to.
"""
from __future__ import annotations

from typing import Sequence

from gateway_operator.api import reasons
from gateway_operator.core.dedup_history import StoreFacts
from gateway_operator.core.probe_result import ProbeResult


# -- the outcomes an unprivileged target is told in (redis_guard.py): they say nothing of what answered

def unreachable(where: str, timeout: float, why: str = "") -> ProbeResult:
    return ProbeResult(False, reasons.CONNECTION_FAILED,
                       f"cannot reach a Redis this GatewayDeployment may use at {where} "
                       f"({why or f'no connection or no answer within {timeout:g}s'})")


def unusable(where: str) -> ProbeResult:
    return ProbeResult(False, reasons.PROBE_FAILED,
                       f"{where} did not complete a SET NX PX round trip as a Redis this gateway can use (with the "
                       "configured credentials and TLS settings, if any); the operator explains the failures of a "
                       "Redis its redisProbe.allow names")


def held_back(where: str, timeout: float, remaining: float) -> ProbeResult:
    """A namespace whose probes keep failing waits its turn: ``remaining`` seconds more."""
    return unreachable(where, timeout, f"not probed before {remaining:.0f}s more: the namespace's last probes failed")


# -- before any connection

def managed_redis_starting(where: str) -> ProbeResult:
    """An ordinary start, not a failure (no Warning for it)."""
    return ProbeResult(False, reasons.MANAGED_REDIS_STARTING,
                       f"waiting for the managed Redis {where} to have a ready pod")


def target_not_allowed(host: str) -> ProbeResult:
    return ProbeResult(False, reasons.TARGET_NOT_ALLOWED,
                       f"{host} is outside the operator's Redis allowlist; the probe did not connect")


# -- the round trip

def succeeded(where: str, facts: StoreFacts | None) -> ProbeResult:
    return ProbeResult(True, reasons.PROBE_SUCCEEDED, f"Redis at {where} answered a SET NX PX round trip", facts)


def set_refused(where: str) -> ProbeResult:
    return ProbeResult(False, reasons.PROBE_FAILED, f"SET NX PX under the prefix was refused at {where}")


def value_not_returned(where: str) -> ProbeResult:
    return ProbeResult(False, reasons.PROBE_FAILED, f"Redis at {where} did not return the probe value")


def answered_unexpectedly(where: str, error: str) -> ProbeResult:
    """``error``: the exception's type name (e.g. something that is not Redis answers on that port)."""
    return ProbeResult(False, reasons.PROBE_FAILED, f"Redis at {where} answered unexpectedly: {error}")


def refused_probe(where: str, error: str) -> ProbeResult:
    """A refusal that is neither a refused password nor a NOPERM; ``error``: its type name."""
    return ProbeResult(False, reasons.PROBE_FAILED, f"Redis at {where} refused the probe: {error}")


# -- the credentials

def refused_password(where: str, named_user: bool) -> ProbeResult:
    """``named_user``: an ACL user was configured (spec.redis.usernameSecretRef)."""
    if named_user:
        return ProbeResult(False, reasons.AUTHENTICATION_FAILED,
                           f"Redis at {where} did not accept the user of spec.redis.usernameSecretRef with the "
                           "password of spec.redis.passwordSecretRef (a wrong user or password, or a disabled user)")
    return ProbeResult(False, reasons.AUTHENTICATION_FAILED,
                       f"Redis at {where} did not accept the password of spec.redis.passwordSecretRef (or needs one)")


def not_permitted(where: str, refused: Sequence[str], named_user: bool) -> ProbeResult:
    """NOPERM: the ACL user lacks commands or the key pattern (the server's text names the user,
    which is not repeated: only what was refused). ``named_user``: as refused_password's."""
    who = ("the user of spec.redis.usernameSecretRef" if named_user
           else "the default user (signed in with spec.redis.passwordSecretRef alone)")
    return ProbeResult(False, reasons.COMMAND_NOT_PERMITTED,
                       f"Redis at {where} refused {', '.join(refused)} to {who} (NOPERM), which the gateway needs: "
                       "grant it the least-privilege ACL of docs/redis.md (gateway-operator redis-acl prints it)")


# -- the connection and TLS

def cannot_connect(where: str, why: str) -> ProbeResult:
    """``why``: the first line of the error, a type name, or how long nothing answered."""
    return ProbeResult(False, reasons.CONNECTION_FAILED, f"cannot connect to Redis at {where}: {why}")


def no_tls_handshake(where: str, timeout: float) -> ProbeResult:
    return ProbeResult(False, reasons.CONNECTION_FAILED, f"cannot connect to Redis at {where}: no TLS "
                       f"handshake within {timeout:g}s (is it reachable, and does it serve TLS there?)")


def tls_certificate_expired(where: str, detail: str) -> ProbeResult:
    """``detail``: what the certificate check said."""
    return ProbeResult(False, reasons.TLS_CERTIFICATE_EXPIRED,
                       f"the TLS certificate of Redis at {where} is not valid now ({detail}): the server "
                       "needs a renewed certificate")


def tls_name_mismatch(where: str, server_name: str, detail: str) -> ProbeResult:
    return ProbeResult(False, reasons.TLS_NAME_MISMATCH,
                       f"the TLS certificate of Redis at {where} does not carry the name "
                       f"{server_name} ({detail}): set spec.redis.tls.serverName to a name it "
                       "carries")


def tls_certificate_untrusted(where: str, detail: str, own_ca: bool) -> ProbeResult:
    """``own_ca``: a CA bundle was configured (spec.redis.tls.caSecretRef), else the system's CAs were used."""
    source = "the CA bundle of spec.redis.tls.caSecretRef" if own_ca else "the system's CAs"
    return ProbeResult(False, reasons.TLS_CERTIFICATE_UNTRUSTED,
                       f"the TLS certificate of Redis at {where} is not signed by {source} ({detail}): set "
                       "spec.redis.tls.caSecretRef to the CA that signed it")


def tls_handshake_failed(where: str, why: str) -> ProbeResult:
    """``why``: the TLS error's reason, or its type name."""
    return ProbeResult(False, reasons.TLS_HANDSHAKE_FAILED,
                       f"no TLS session with Redis at {where} ({why}): does it "
                       "serve TLS on that port?")
