"""The operator's own Redis probe: connect, authenticate, and a ``SET NX PX`` round trip
under the gateway's prefix - the same operations the idempotency store needs.

A replica's clean /health proves nothing until it has handled a webhook (its store is built
lazily), so this probe is what gates scale-out and what RedisReachable reports.
"""
from __future__ import annotations

import secrets
from dataclasses import dataclass

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from .redis_target import RedisTarget


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    reason: str   # ProbeSucceeded | ConnectionFailed | AuthenticationFailed | ProbeFailed
    message: str  # never holds the password


def probe(target: RedisTarget, password: str | None, timeout: float = 2.0,
          host_override: str | None = None) -> ProbeResult:
    """``host_override`` lets the operator reach a managed Redis by pod IP when the Service
    name does not resolve where the operator runs."""
    host = host_override or target.host
    where = f"{host}:{target.port}/{target.db}"
    # no retries: one probe is one attempt, bounded by the timeout (redis-py retries by default)
    client = redis.Redis(host=host, port=target.port, db=target.db, password=password or None,
                         ssl=target.tls, socket_timeout=timeout, socket_connect_timeout=timeout,
                         retry=Retry(NoBackoff(), 0))
    key = f"{target.prefix}operator-probe:{secrets.token_hex(8)}"
    try:
        token = secrets.token_hex(8)
        if not client.set(key, token, nx=True, px=10_000):
            return ProbeResult(False, "ProbeFailed", f"SET NX PX under the prefix was refused at {where}")
        if client.get(key) != token.encode():
            return ProbeResult(False, "ProbeFailed", f"Redis at {where} did not return the probe value")
        client.delete(key)
        return ProbeResult(True, "ProbeSucceeded", f"Redis at {where} answered a SET NX PX round trip")
    except redis.AuthenticationError:
        return ProbeResult(False, "AuthenticationFailed", f"Redis at {where} refused the password")
    except redis.ResponseError as e:
        if "NOAUTH" in str(e) or "WRONGPASS" in str(e):
            return ProbeResult(False, "AuthenticationFailed",
                               f"Redis at {where} requires a password that was not accepted")
        return ProbeResult(False, "ProbeFailed", f"Redis at {where} refused the probe: {type(e).__name__}")
    except (redis.ConnectionError, redis.TimeoutError, OSError) as e:
        return ProbeResult(False, "ConnectionFailed", f"cannot connect to Redis at {where}: {_short(e)}")
    except redis.RedisError as e:  # e.g. something that is not Redis answers on that port
        return ProbeResult(False, "ProbeFailed", f"Redis at {where} answered unexpectedly: {type(e).__name__}")
    finally:
        client.close()


def _short(error: Exception) -> str:
    # redis-py's connection errors name host and port only; keep the first line
    return str(error).splitlines()[0][:200] if str(error) else type(error).__name__
