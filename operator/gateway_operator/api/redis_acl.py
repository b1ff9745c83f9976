"""The least-privilege Redis ACL of one GatewayDeployment: what its gateway (praisonai-bot 0.1.16),
its launcher and the operator's probe run, under its prefix and nothing else.

Found by running the real gateway through the launcher against redis-server with MONITOR (and a
wire log for what MONITOR hides), then proven with that user alone: tests/unit/test_redis_tls.py (the
probe) and tests/unit/test_launcher_real_gateway.py (the gateway, and what it does without one command).
``gateway-operator redis-acl`` prints the line; docs/redis.md explains each command.
"""
from __future__ import annotations

from typing import Mapping

#: command -> who sends it (top level, or inside the gateway's Lua scripts)
COMMANDS: Mapping[str, str] = {
    "ping": "the idempotency store, when it is built",
    "get": "claims, the session lock, the probe; inside every compare-and-delete script",
    "set": "claims (SET NX PX), records, the session lock, the owner key, the migration, the probe",
    "del": "the probe; inside the release scripts; session histories past spec.sessions.maxSessions",
    "exists": "the gateway's auth rate limiter (inside its script)",
    "incr": "the gateway's auth rate limiter (inside its script)",
    "expire": "the shared session history (one MULTI per message)",
    "pexpire": "the session lock's renewal; the turn lock's; the rate limiter",
    "pttl": "the gateway's auth rate limiter",
    "rpush": "the shared session history",
    "ltrim": "the shared session history (bounded to spec.sessions.maxMessages)",
    "lrange": "the shared session history",
    "multi": "the shared session history",
    "exec": "the shared session history",
    "zadd": "the index of session histories (<prefix>sessions), bounded to spec.sessions.maxSessions",
    "zremrangebyscore": "the index of session histories: entries older than spec.sessions.ttlSeconds",
    "zcard": "the index of session histories: how many there are",
    "zpopmin": "the index of session histories: the least recently used, deleted past maxSessions",
    "eval": "records, releases, renewals and the journal's claim of a running turn (EVALSHA is never sent)",
    "scan": "releasing a stopped or killed replica's unfinished claims (MATCH <prefix>hookidem:*)",
}
#: optional, and when
OPTIONAL: Mapping[str, str] = {
    "select": "only when spec.redis names a db other than 0 (else every connection fails)",
    "info": "lets the probe read run_id, AOF, replication ids and memory (a restart that lost the records, a "
            "failover, a Redis close to maxmemory); refused: not checked",
    "client|setinfo": "Redis 7.2+ and Valkey only (7.0 refuses the whole line): redis-py sends it on every "
                      "connection and ignores the refusal, which ACL LOG would record",
}


def rules(prefix: str, db: int = 0, password: str = "<password>") -> str:
    """The rules of ``ACL SETUSER <user> ...`` for a GatewayDeployment with ``prefix``."""
    commands = [*COMMANDS, *(["select"] if db else [])]
    return (f"on >{password} resetkeys ~{prefix}* resetchannels -@all "
            + " ".join(f"+{c}" for c in commands))
