"""Tests for the gateway pod launcher (operator/gateway_operator/pod: launch.py and its modules).

These run the REAL gateway (praisonai-bot 0.1.16, started through launch.py
as a subprocess, exactly as the pod runs it) against a REAL ``redis-server``
(``harness.redis_server.RedisServer``: a free loopback port,
``--save "" --appendonly no`` and a password, stopped at teardown).

Nothing in the gateway is mocked. The only stand-in is for the LLM:
``harness.llm_standin.StandInLLM``, a tiny offline OpenAI-compatible HTTP
server (``POST /v1/chat/completions``) that the gateway reaches through
``OPENAI_BASE_URL`` so hook-triggered agent turns complete without network.

Each launcher process gets its own HOME (the SQLite fallback lives in
``$HOME/.praisonai/state``) and its own port on 127.0.0.1; every process is
stopped (SIGTERM, then SIGKILL) in teardown.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import pytest
import yaml

pytest.importorskip("praisonai_bot", reason="the real gateway (praisonai-bot) is not installed in this interpreter")
pytest.importorskip("redis", reason="redis-py (a praisonai-bot dependency) is not installed")
if shutil.which("redis-server") is None:
    pytest.skip("redis-server is not installed", allow_module_level=True)

from harness import pod_code  # noqa: E402
from harness.llm_standin import API_KEY as LLM_API_KEY, StandInLLM  # noqa: E402
from harness.processes import free_port, terminate  # noqa: E402
from harness.redis_server import RedisServer  # noqa: E402
from harness.wait import stays, until  # noqa: E402

# Strong enough for the gateway's weak-secret check; fake, test-only values.
AUTH_TOKEN = "test-gw-token-4f9c2e7a1b8d4c6e9f0a3b5c7d9e1f2a"
# Characters that must be URL-quoted when embedded in redis://:pw@host.
REDIS_PASSWORD = "s3cr3t/p@ss:w0rd"
PREFIX = "gwop:testns:gw:"
HOOK_PATH = pod_code.HOOK_PATH
STARTUP_TIMEOUT = 20.0
REQUEST_TIMEOUT = 30.0


pod_code.importable()
import gwop_config as config  # noqa: E402
import gwop_contract as contract  # noqa: E402
import gwop_migration as migration  # noqa: E402
import gwop_upstream as upstream  # noqa: E402
import launch as entry  # noqa: E402

# what this run's gateway is: the venv's (requirements-dev.txt), or the release hack/release-matrix.sh
# put first on PYTHONPATH
RUNNING = {p: importlib.metadata.version(p) for p in ("praisonai-bot", "praisonaiagents")}
RUNNING_LINE = f"praisonai-bot {RUNNING['praisonai-bot']}, praisonaiagents {RUNNING['praisonaiagents']}"


# --------------------------------------------------------------------------
# Launcher processes (the real gateway)
# --------------------------------------------------------------------------


class LaunchedGateway:
    def __init__(self, proc: subprocess.Popen, port: int, log: Path) -> None:
        self.proc = proc
        self.port = port
        self.log = log

    def request(self, method: str, path: str, body: Optional[Dict[str, Any]] = None) -> Tuple[int, Dict[str, Any]]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data, method=method)
        req.add_header("Authorization", f"Bearer {AUTH_TOKEN}")
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT) as resp:
                return resp.status, json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"{}")

    def webhook(self, payload: Dict[str, Any]) -> Tuple[int, Dict[str, Any]]:
        return self.request("POST", f"/hooks/{HOOK_PATH}", payload)

    def health(self) -> Dict[str, Any]:
        status, body = self.request("GET", "/health")
        assert status == 200, body
        return body

    def idempotency_owners(self) -> List[Dict[str, Any]]:
        return [o for o in self.health().get("degraded_owners", []) if o.get("owner_id") == "durability:idempotency"]

    def wait_ready(self) -> None:
        def up() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"launcher exited with {self.proc.returncode}:\n{self.output()}")
            try:
                return self.request("GET", "/health")[0] == 200
            except (OSError, ValueError):
                return False

        _wait_until(up, STARTUP_TIMEOUT, f"gateway on port {self.port} did not come up:\n{self.output()}")

    def stop(self) -> Optional[int]:
        return terminate(self.proc, grace=15.0)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def _gateway_env(home: Path, llm: Optional[StandInLLM]) -> Dict[str, str]:
    # Minimal env: no proxies, no stray platform credentials the schema could
    # auto-enable channels from.
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "GATEWAY_AUTH_TOKEN": AUTH_TOKEN,
        "GATEWAY_REDIS_PASSWORD": REDIS_PASSWORD,
        "OPENAI_API_KEY": LLM_API_KEY,
        "PRAISONAI_TELEMETRY_DISABLED": "true",
        "DO_NOT_TRACK": "true",
    }
    if llm is not None:
        env["OPENAI_BASE_URL"] = llm.base_url
    if os.environ.get("PYTHONPATH"):  # hack/release-matrix.sh: another praisonai-bot release first
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


def run_launcher(tmp: Path, name: str, documented: Any, llm: Optional[StandInLLM], port: int,
                 extra_env: Optional[Dict[str, str]] = None) -> subprocess.Popen:
    base = tmp / name
    (base / "home").mkdir(parents=True, exist_ok=True)
    config = base / "gateway.yaml"
    config.write_text(documented if isinstance(documented, str) else yaml.safe_dump(documented))
    log = open(base / "launcher.log", "wb")
    try:
        return subprocess.Popen(
            [sys.executable, str(pod_code.LAUNCH), "--config", str(config), "--workdir", str(base / "work"),
             "--host", "127.0.0.1", "--port", str(port)],
            env={**_gateway_env(base / "home", llm), **(extra_env or {})}, stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT,
        )
    finally:
        log.close()


def documented_config(redis: Optional[RedisServer], *, url_form: bool = True,
                      guard: Optional[Dict[str, float]] = None) -> Dict[str, Any]:
    """A config in the operator's documented shape (``guard``: its idempotency_guard section; the
    launcher's defaults without it)."""
    cfg: Dict[str, Any] = pod_code.documented_config()
    if redis is not None:
        where = ({"url": f"redis://127.0.0.1:{redis.port}/0"} if url_form
                 else {"host": "127.0.0.1", "port": redis.port, "db": 0})
        cfg["push"] = {"redis": {**where, "password": "${GATEWAY_REDIS_PASSWORD}", "prefix": PREFIX}}
    if guard is not None:
        cfg["idempotency_guard"] = guard
    return cfg


def _runs_when_retried(replica: Any, msg: str) -> Callable[[], bool]:
    """The provider's retry of ``msg`` to ``replica``: True once it runs the agent (503 until then)."""
    def retried() -> bool:
        answer = replica.webhook({"id": msg, "text": f"msg={msg} delay=0"})
        assert answer[0] in (200, 503), answer
        return answer[0] == 200 and answer[1].get("action") == "agent"
    return retried


def _wait_until(predicate: Callable[[], bool], timeout: float, message: str) -> None:
    """harness.wait.until, polling every 0.1 s, with nothing tolerated (a launcher that exited fails at once)."""
    until(predicate, timeout=timeout, interval=0.1, what=message, tolerate=())


# --------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------


@pytest.fixture
def real_redis() -> Iterator[RedisServer]:
    server = RedisServer(password=REDIS_PASSWORD).start()
    yield server
    server.close()


@pytest.fixture
def launch(tmp_path: Path, llm: StandInLLM) -> Iterator[Callable[[str, Dict[str, Any]], LaunchedGateway]]:
    started: List[LaunchedGateway] = []

    def _launch(name: str, documented: Dict[str, Any], env: Optional[Dict[str, str]] = None) -> LaunchedGateway:
        port = free_port()
        proc = run_launcher(tmp_path, name, documented, llm, port, env)
        gateway = LaunchedGateway(proc, port, tmp_path / name / "launcher.log")
        started.append(gateway)
        gateway.wait_ready()
        return gateway

    yield _launch
    for gateway in started:
        gateway.stop()


# --------------------------------------------------------------------------
# What needs the gateway's own packages
# --------------------------------------------------------------------------


def test_redis_settings_output_builds_real_redis_config() -> None:
    from praisonaiagents.gateway.config import RedisConfig

    settings = config.redis_settings({"push": {"redis": {"host": "h", "port": 1, "prefix": "p:"}}}, {})
    assert RedisConfig(**settings).prefix == "p:"


# --------------------------------------------------------------------------
# Real gateway + real Redis
# --------------------------------------------------------------------------


@pytest.mark.release_matrix
def test_two_replicas_share_redis_idempotency(launch, real_redis: RedisServer, llm: StandInLLM) -> None:
    # Same Redis, same prefix; A uses the url form, B the host/port/db form.
    a = launch("replica-a", documented_config(real_redis, url_form=True))
    b = launch("replica-b", documented_config(real_redis, url_form=False))
    turns_before = llm.completions

    # The idempotency store is built lazily on a replica's first webhook.
    for name, gw in (("a", a), ("b", b)):
        status, body = gw.webhook({"id": f"warmup-{name}", "text": "hello"})
        assert (status, body.get("ok"), body.get("action")) == (200, True, "agent"), body
        assert gw.idempotency_owners() == [], gw.health().get("degraded_owners")
        own = gw.health()["gateway_operator"]
        assert own["versions"] == RUNNING, own
        assert (own["idempotency"]["store"], own["idempotency"]["redis"]) == ("redis", "answers"), own

    status, first = a.webhook({"id": "shared-1", "text": "same delivery"})
    assert status == 200 and first.get("ok") is True and not first.get("deduplicated"), first
    status, second = b.webhook({"id": "shared-1", "text": "same delivery"})
    assert (status, second) == (200, {"ok": True, "deduplicated": True})

    assert llm.completions - turns_before == 3  # B never ran the duplicate turn
    keys = real_redis.client().keys(f"{PREFIX}hookidem:*")
    assert len(keys) == 3, keys

    for gw in (a, b):  # SIGTERM is a clean stop
        assert gw.stop() == 0, gw.output()
    assert REDIS_PASSWORD not in a.output() + b.output()


@pytest.mark.release_matrix
def test_a_store_built_while_redis_is_down_holds_then_asks_redis_once_it_answers(
        launch, real_redis: RedisServer, llm: StandInLLM) -> None:
    """A replica whose first webhook arrives while Redis does not answer (a partition from Redis
    before its store is built): 0.1.16 falls back to a per-replica SQLite store for the life of the
    process and runs the agent, so the same webhook delivered to a replica that reaches Redis runs
    again (a silent duplicate). The launcher treats it as an outage of the Redis store: the delivery
    is answered 503 (retry), /health says "unreachable at runtime", nothing runs; once Redis answers
    the replica asks it, and the webhook that the other replica ran meanwhile is deduplicated."""
    from gateway_operator.core.render.gateway_config import REDIS_CLIENT_OPTIONS
    documented = documented_config(real_redis)
    documented["push"]["redis"]["url"] += f"?{REDIS_CLIENT_OPTIONS}"
    cut_off = launch("cut-off", documented)
    other = launch("other", documented)
    assert cut_off.idempotency_owners() == []  # nothing built yet
    real_redis.pause()
    try:
        status, body = cut_off.webhook({"id": "first", "text": "msg=first"})
        assert status == 503 and body.get("retry") is True, body
        owners = cut_off.idempotency_owners()
        assert len(owners) == 1 and "unreachable at runtime" in owners[0]["reason"], owners
    finally:
        real_redis.resume()
    assert other.webhook({"id": "first", "text": "msg=first"})[1].get("action") == "agent"
    _wait_until(lambda: cut_off.idempotency_owners() == [], 10, "the cut-off replica asking Redis again")
    assert cut_off.webhook({"id": "first", "text": "msg=first"}) == (200, {"ok": True, "deduplicated": True})
    assert [t["msg"] for t in llm.turns].count("first") == 1
    assert "handled as an outage of the Redis store" in cut_off.output(), cut_off.output()


def test_a_replica_says_it_cannot_reach_redis_before_any_webhook(
        launch, real_redis: RedisServer, llm: StandInLLM) -> None:
    """The operator takes a replica cut off from Redis out of the traffic on the replica's own word
    (its readiness gate). A replica cut off before its first webhook (store not built, its journal
    never asked Redis) says so within the probe's period and timeout; once Redis answers again it
    says so, and for how long without a break (the operator waits for that before it believes it)."""
    from gateway_operator.core.render.gateway_config import REDIS_CLIENT_OPTIONS
    import gwop_reach
    documented = documented_config(real_redis)
    documented["push"]["redis"]["url"] += f"?{REDIS_CLIENT_OPTIONS}"
    gw = launch("idle", documented)

    def own() -> dict:
        return gw.health()["gateway_operator"]["idempotency"]
    assert (own()["store"], own()["redis"]) == ("not built", "answers"), own()
    assert own()["answers_for_s"] >= 0
    real_redis.pause()
    try:
        _wait_until(lambda: own()["redis"] == "unreachable", gwop_reach.Reach.PERIOD_S + gwop_reach.Reach.TIMEOUT_S + 2,
                    "the idle replica saying it cannot reach Redis")
        assert "answers_for_s" not in own() and own()["store"] == "not built", own()
    finally:
        real_redis.resume()
    resumed = time.monotonic()
    _wait_until(lambda: own()["redis"] == "answers", gwop_reach.Reach.PERIOD_S + 2, "the replica reaching Redis again")
    first = own()["answers_for_s"]
    assert first <= time.monotonic() - resumed + 0.2, first  # counted from the recovery, not the start
    time.sleep(1.2)
    assert own()["answers_for_s"] >= first + 1.0


@pytest.mark.release_matrix
def test_the_health_watch_says_at_once_what_health_says_and_the_operator_hears_it(
        launch, real_redis: RedisServer, llm: StandInLLM) -> None:
    """Health as a watch (issue 33): the launcher started with a watch port serves the long-poll
    /health there, with the same body as the gateway's own /health (the launcher's section
    included). The operator's watch (health_watch.Watch, real) hears the replica go from reaching
    Redis to cut off, and back, each within the replica's own probe (period and timeout) plus a
    second, not at its next poll; and a silent replica once an interval."""
    import asyncio
    import gwop_reach
    from gateway_operator.clients.health_watch import Watch
    from gateway_operator.core.health import Target
    from gateway_operator.core.render.gateway_config import REDIS_CLIENT_OPTIONS
    documented = documented_config(real_redis)
    documented["push"]["redis"]["url"] += f"?{REDIS_CLIENT_OPTIONS}"
    watch_port = free_port()
    gw = launch("watched", documented, {"GATEWAY_WATCH_PORT": str(watch_port)})
    bound = gwop_reach.Reach.PERIOD_S + gwop_reach.Reach.TIMEOUT_S + 1.0
    interval = 20.0

    async def main() -> None:
        news: list = []
        watch = Watch(news=lambda: news.append(time.monotonic()))
        watch.follow([Target("watched-0", "127.0.0.1", watch_port)], interval=interval, timeout=2.0)

        async def heard(what: str, redis: str, seconds: float) -> float:
            started = time.monotonic()
            while True:
                last = watch.answer("watched-0", time.monotonic())
                if last is not None and last.redis == redis:
                    return time.monotonic() - started
                assert time.monotonic() - started < seconds, f"not within {seconds} s: {what} ({last})"
                await asyncio.sleep(0.05)
        try:
            await heard("the first answer", "answers", STARTUP_TIMEOUT)
            first = watch.answer("watched-0", time.monotonic())
            assert first is not None and first.versions == (RUNNING["praisonai-bot"], RUNNING["praisonaiagents"])
            own = await asyncio.to_thread(gw.health)
            assert own["gateway_operator"]["idempotency"]["redis"] == "answers"
            await asyncio.sleep(6.0)  # past the bound the watch asks for (answers_for_s): quiet now
            quiet = len(news)
            real_redis.pause()
            try:
                took = await heard("the replica cut off", "unreachable", bound)
                print(f"cut off: heard after {took:.2f} s (bound {bound:.1f} s, interval {interval:g} s)")
            finally:
                real_redis.resume()
            took = await heard("the replica reaching Redis again", "answers", bound)
            print(f"reaching Redis again: heard after {took:.2f} s")
            assert len(news) >= quiet + 2
        finally:
            watch.close()

    asyncio.run(main())


def test_a_hung_redis_is_answered_503_within_a_second_then_fails_open_after_the_window(
        launch, real_redis: RedisServer, llm: StandInLLM) -> None:
    """The URL the operator renders bounds redis-py's socket timeouts (redis-py's defaults held a
    webhook more than 15 s). With Redis paused (SIGSTOP: connections open, nothing answers), a replica
    that cannot ask Redis answers 503 with Retry-After within a second and runs nothing (the
    provider retries), without asking Redis again for each delivery; past failClosedSeconds it
    admits best-effort, as the gateway documents."""
    from gateway_operator.core.render.gateway_config import REDIS_CLIENT_OPTIONS
    window = 4.0
    documented = documented_config(real_redis, guard={"fail_closed_seconds": window})
    documented["push"]["redis"]["url"] += f"?{REDIS_CLIENT_OPTIONS}"
    gw = launch("replica", documented)
    assert gw.webhook({"id": "before-the-hang", "text": "hello"})[0] == 200  # the store is built
    real_redis.pause()
    try:
        paused = time.monotonic()
        for attempt in range(2):
            started = time.monotonic()
            status, body = gw.webhook({"id": f"held-{attempt}", "text": f"msg=held-{attempt}"})
            took = time.monotonic() - started
            print(f"webhook with Redis paused, in the window: {status} in {took:.2f} s")
            assert status == 503 and body.get("retry") is True, body
            assert took < (2.0 if attempt == 0 else 0.5), took  # the second one does not ask Redis
        own = gw.health()["gateway_operator"]["idempotency"]  # the replica's own view
        assert (own["store"], own["redis"], own["holding"], own["admitted_best_effort"]) == \
            ("redis", "unreachable", True, 0), own
        _wait_until(lambda: time.monotonic() - paused > window + 0.5, window + 5, "the window over")
        started = time.monotonic()
        status, body = gw.webhook({"id": "after-the-window", "text": "hello"})
        assert status == 200 and body.get("ok") is True, body
        assert time.monotonic() - started < 2.0
        owners = gw.idempotency_owners()
        assert owners and "unreachable at runtime" in owners[0]["reason"], owners
        own = gw.health()["gateway_operator"]["idempotency"]
        assert (own["holding"], own["admitted_best_effort"], own["journalled"]) == (False, 1, 1), own
        assert own["unusable_for_s"] > window, own
    finally:
        real_redis.resume()
    assert not [t for t in llm.turns if t["msg"].startswith("held-")]
    assert "answered 503 for up to 4s" in gw.output(), gw.output()


def test_a_replica_whose_renewal_round_finds_redis_gone_says_so_in_health_before_any_webhook(
        launch, real_redis: RedisServer, llm: StandInLLM) -> None:
    """Redis paused (SIGSTOP) with no webhook under way: the first to notice is a claim renewal round
    (it refreshes the store's owner record even with no claim held), which opens the breaker. The
    replica's /health lists durability:idempotency from then on, as when a webhook's own call
    fails, so that IdempotencyDegraded counts it while it holds deliveries and, past the window,
    admits them best-effort without asking the store (in CI a replica held a webhook 503 and listed
    nothing); once Redis answers the entry goes without a webhook."""
    from gateway_operator.core.render.gateway_config import REDIS_CLIENT_OPTIONS
    documented = documented_config(real_redis, guard={"claim_lease_seconds": 10, "fail_closed_seconds": 30})
    documented["push"]["redis"]["url"] += f"?{REDIS_CLIENT_OPTIONS}"
    gw = launch("renewal-first", documented, {"HOSTNAME": "eo-bot-renewal-first"})
    assert gw.webhook({"id": "renewal-before", "text": "msg=renewal-before"})[0] == 200  # the store is built, its owner recorded
    own = lambda: gw.health()["gateway_operator"]["idempotency"]  # noqa: E731
    assert (own()["holding"], gw.idempotency_owners()) == (False, []), gw.health()
    real_redis.pause()
    try:
        _wait_until(lambda: own()["holding"], 10, "a renewal round opening the breaker")
        assert own()["redis"] == "unreachable", own()
        owners = gw.idempotency_owners()
        assert owners and "unreachable at runtime" in owners[0]["reason"], gw.health()
        status, body = gw.webhook({"id": "renewal-held", "text": "msg=renewal-held"})
        assert status == 503 and body.get("retry") is True, body
    finally:
        real_redis.resume()
    _wait_until(lambda: gw.idempotency_owners() == [] and not own()["holding"], 15, "the entry gone once Redis answers")
    assert gw.webhook({"id": "renewal-held", "text": "msg=renewal-held"})[1].get("action") == "agent"
    assert [t["msg"] for t in llm.turns].count("renewal-held") == 1


@pytest.mark.release_matrix
def test_a_stall_shorter_than_the_window_never_runs_a_recorded_webhook_again(
        launch, real_redis: RedisServer, llm: StandInLLM) -> None:
    """A latency blip (Redis stalled 0.6 s, longer than the client's 0.3 s timeout): a redelivery of a
    webhook Redis has recorded is not run again (0.1.16's breaker admitted it without asking Redis),
    and a new webhook held meanwhile runs once when retried, though its claim may have reached Redis
    after the timeout (the replica releases it once Redis answers)."""
    from gateway_operator.core.render.gateway_config import REDIS_CLIENT_OPTIONS
    documented = documented_config(real_redis)
    documented["push"]["redis"]["url"] += f"?{REDIS_CLIENT_OPTIONS}"
    gw = launch("blip", documented)
    assert gw.webhook({"id": "recorded", "text": "msg=recorded"})[:1] == (200,)
    real_redis.pause()
    try:
        answers = [gw.webhook({"id": "recorded", "text": "msg=recorded"}), gw.webhook({"id": "new", "text": "msg=new"})]
        time.sleep(0.6)
    finally:
        real_redis.resume()
    assert all(status == 503 for status, _ in answers), answers
    _wait_until(lambda: gw.idempotency_owners() == [], 10, "the replica asking Redis again")

    def answered(delivery: str) -> Tuple[int, Dict[str, Any]]:
        found: Dict[str, Any] = {}

        def ok() -> bool:
            found["answer"] = gw.webhook({"id": delivery, "text": f"msg={delivery}"})
            return found["answer"][0] == 200
        _wait_until(ok, 15, f"{delivery} answered 200")
        return found["answer"]
    assert answered("recorded") == (200, {"ok": True, "deduplicated": True})
    assert answered("new")[1].get("action") == "agent"
    assert answered("new") == (200, {"ok": True, "deduplicated": True})
    assert [t["msg"] for t in llm.turns if t["answered"]].count("recorded") == 1
    assert [t["msg"] for t in llm.turns if t["answered"]].count("new") == 1


def test_a_redis_out_of_memory_is_named_in_health_and_holds_webhooks_until_it_takes_writes(
        launch, real_redis: RedisServer, llm: StandInLLM) -> None:
    """A Redis that answers PING but refuses writes (maxmemory under noeviction): 0.1.16 says only
    "unreachable at runtime". The replica holds webhooks (503, retry), /health names the refusal
    (the operator's RedisOutOfMemory), and once Redis takes writes the held webhook runs once."""
    from gateway_operator.core.health import Idempotency, classify
    gw = launch("oom", documented_config(real_redis))
    assert gw.webhook({"id": "before", "text": "msg=before"})[0] == 200  # the store is built
    admin = real_redis.client()
    used = int(admin.info("memory")["used_memory"])
    admin.config_set("maxmemory-policy", "noeviction")
    admin.config_set("maxmemory", str(used // 2))
    try:
        status, body = gw.webhook({"id": "held", "text": "msg=held"})
        assert status == 503 and body.get("retry") is True, body
        # named by the failing call itself, before the webhook is answered (not at a later probe)
        assert classify(gw.health()) is Idempotency.REDIS_OUT_OF_MEMORY, gw.health()
        assert admin.ping()  # PING still answers
        own = gw.health()["gateway_operator"]["idempotency"]
        assert (own["redis"], own["refusal"]) == ("refusing", "Redis refuses writes: out of memory (maxmemory under "
                                                               "noeviction)"), own
    finally:
        admin.config_set("maxmemory", "0")
    _wait_until(lambda: gw.idempotency_owners() == [], 10, "the replica asking Redis again")
    assert gw.webhook({"id": "held", "text": "msg=held"})[1].get("action") == "agent"
    assert [t["msg"] for t in llm.turns].count("held") == 1
    assert "Redis refuses writes: out of memory" in gw.output(), gw.output()


@pytest.mark.release_matrix
def test_what_a_replica_admitted_while_redis_was_paused_is_recorded_once_it_answers(
        launch, real_redis: RedisServer, llm: StandInLLM) -> None:
    """0.1.16 fails open while Redis hangs and records nothing, so a redelivery after Redis is
    back ran the agent again while every condition said exactly-once held (the checker's silent
    duplicates after a Redis pause). The launcher journals what it admitted meanwhile and writes
    it to Redis once Redis answers: the redelivery, to another replica, is deduplicated."""
    from gateway_operator.core.render.gateway_config import REDIS_CLIENT_OPTIONS
    documented = documented_config(real_redis, guard={"fail_closed_seconds": 0})  # fail open at once
    documented["push"]["redis"]["url"] += f"?{REDIS_CLIENT_OPTIONS}"
    a, b = launch("paused-a", documented), launch("paused-b", documented)
    for name, gw in (("a", a), ("b", b)):
        assert gw.webhook({"id": f"warm-{name}", "text": "hello"})[0] == 200  # the stores are built
    real_redis.pause()
    try:
        status, body = a.webhook({"id": "during-the-pause", "text": "msg=during-the-pause"})
        assert status == 200 and body.get("action") == "agent", body  # admitted (fail-open) and run
        again = a.webhook({"id": "during-the-pause", "text": "msg=during-the-pause"})
        assert again[0] == 503 or again[1].get("deduplicated"), again  # this replica knows it ran
    finally:
        real_redis.resume()
    def recorded() -> int:
        client = real_redis.client()
        return sum(client.get(k) == "recorded" for k in client.keys(f"{PREFIX}hookidem:*"))
    _wait_until(lambda: recorded() == 3, 10, "the journalled record in Redis (two warm-ups and it)")
    # and the replica reports the outage over by itself, before any further webhook
    _wait_until(lambda: a.idempotency_owners() == [], 10, "replica a's degraded fact cleared")
    assert b.webhook({"id": "during-the-pause", "text": "msg=during-the-pause"}) == \
        (200, {"ok": True, "deduplicated": True})
    assert sum(t["msg"] == "during-the-pause" and t["answered"] for t in llm.turns) == 1
    assert "admitted while Redis was unusable to Redis" in a.output()


def test_a_replica_stopped_with_a_journal_says_when_it_carried_it_all_to_redis(
        launch, real_redis: RedisServer, llm: StandInLLM) -> None:
    """A replica stopped while Redis is paused, with a webhook it admitted in its journal: Redis
    answers within its carry budget, the record goes in, and the replica leaves its word
    ``<prefix>gwop-carried:<pod>`` for the operator, which then opens no AdmissionsNotRecorded window
    for it (unrecorded.settle). Stopped while Redis stays down past the budget: no word, and the
    operator counts its journal as left behind."""
    import threading
    from gateway_operator.pod.gwop_contract import carried_key
    from gateway_operator.core.render.gateway_config import REDIS_CLIENT_OPTIONS
    documented = documented_config(real_redis, guard={"fail_closed_seconds": 0})  # fail open at once
    documented["push"]["redis"]["url"] += f"?{REDIS_CLIENT_OPTIONS}"
    for pod, resume_after in (("pod-carries", 1.0), ("pod-cannot", None)):
        gw = launch(pod, documented, {"HOSTNAME": pod})
        assert gw.webhook({"id": f"warm-{pod}", "text": "hello"})[0] == 200  # the store is built
        real_redis.pause()
        try:
            status, body = gw.webhook({"id": f"held-{pod}", "text": f"msg=held-{pod}"})
            assert status == 200 and body.get("action") == "agent", body  # admitted, journalled
            if resume_after is not None:
                threading.Timer(resume_after, real_redis.resume).start()
            gw.stop()
        finally:
            if real_redis.running:
                real_redis.resume()
        word = real_redis.client().get(carried_key(PREFIX, pod))
        records = [real_redis.client().get(k) for k in real_redis.client().keys(f"{PREFIX}hookidem:*")]
        if resume_after is not None:  # the warm-up's record, and the journalled one's (keys are hashed)
            assert word is not None and records == ["recorded"] * 2, (word, records, gw.output()[-2000:])
        else:
            assert word is None, word
            assert "stopping with 1 journalled webhook(s)" in gw.output()


@pytest.mark.parametrize(
    "name, documented, expected",
    [
        ("invalid-yaml", "gateway: {host: [\n", "invalid YAML"),
        ("unknown-gateway-key", {**documented_config(None), "gateway": {"drain_timout": 5}}, "drain_timout"),
        ("missing-agents", {k: v for k, v in documented_config(None).items() if k != "agents"}, "agents"),
        ("bad-turn-lock", {**documented_config(None), "turn_lock": {"backend": "zookeeper"}}, "turn_lock"),
    ],
)
def test_rejected_config_exits_78_with_clear_message(tmp_path: Path, name: str, documented: Any, expected: str) -> None:
    proc = run_launcher(tmp_path, name, documented, None, free_port())
    try:
        code = proc.wait(timeout=STARTUP_TIMEOUT)
    finally:
        terminate(proc, grace=5.0)
    output = (tmp_path / name / "launcher.log").read_text()
    lines = [line for line in output.splitlines() if line.startswith("gateway-launcher: fatal config error:")]

    assert code == 78, output
    assert len(lines) == 1 and expected in lines[0], output
    assert AUTH_TOKEN not in output and REDIS_PASSWORD not in output


# --------------------------------------------------------------------------
# Stopping a replica with a webhook turn in flight (issue 18: no lost turn)
# --------------------------------------------------------------------------


def _turn_in_flight(gw: LaunchedGateway, llm: StandInLLM, delivery: str, seconds: float,
                    session: Optional[str] = None) -> "Dict[str, Any]":
    """Sends a webhook whose model turn takes ``seconds`` (the stand-in's delay=) in a thread and
    waits until the turn has reached the stand-in; the thread's outcome lands in the result."""
    import threading
    outcome: Dict[str, Any] = {}

    def send() -> None:
        try:
            payload = {"id": delivery, "text": f"msg={delivery} delay={seconds}"}
            if session is not None:
                payload.update(session=session, text=f"msg={delivery} session={session} delay={seconds}")
            outcome["answer"] = gw.webhook(payload)
        except Exception as e:  # noqa: BLE001 - a cut delivery is what some tests expect
            outcome["error"] = type(e).__name__
    outcome["thread"] = threading.Thread(target=send, daemon=True)
    outcome["thread"].start()
    _wait_until(lambda: any(t["msg"] == delivery for t in llm.turns), 20, f"turn {delivery} at the LLM stand-in")
    return outcome


@pytest.mark.parametrize("turn, drain", [(3.0, 20), (30.0, 2)], ids=["finishes-inside-the-drain", "outlasts-it"])
@pytest.mark.release_matrix
def test_a_stopping_replica_finishes_or_releases_its_webhook_turn(launch, real_redis: RedisServer, llm: StandInLLM,
                                                                  turn: float, drain: int) -> None:
    """SIGTERM with a webhook turn in flight: a turn that fits the drain is answered and recorded
    (the replica exits 0 afterwards); one that outlasts it is cut when the drain ends, and its
    claim is released, so the provider's retry to the other replica runs it (never answered
    ``deduplicated`` for the 900 s lease, as 0.1.16 alone would)."""
    documented = documented_config(real_redis)
    documented["gateway"]["drain_timeout"] = drain
    a, b = launch("stopping", documented), launch("other", documented_config(real_redis))
    for name, gw in (("a", a), ("b", b)):  # the idempotency store is built on a replica's first webhook
        assert gw.webhook({"id": f"warm-{name}", "text": "hi"})[0] == 200
    delivery = f"drain-{int(turn)}"
    flight = _turn_in_flight(a, llm, delivery, turn)
    started = time.monotonic()
    a.proc.terminate()
    assert a.proc.wait(drain + turn + 15) == 0, a.output()
    took = time.monotonic() - started
    flight["thread"].join(10)
    key = f"{PREFIX}hookidem:"
    values = {k: v for k in real_redis.client().keys(f"{key}*") if (v := real_redis.client().get(k)) is not None}
    if turn < drain:
        assert flight.get("answer", (0, {}))[0] == 200 and not flight["answer"][1].get("deduplicated"), flight
        assert took < drain, took  # it waited for the turn, not for the whole drain
        assert list(values.values()).count("recorded") == 3, values  # two warm-ups and this turn
        assert b.webhook({"id": delivery, "text": "retry"}) == (200, {"ok": True, "deduplicated": True})
    else:
        # the turn was cut: the provider saw no 2xx but a 503 asking for its retry, sent only once
        # the claim was released (a retry sent the moment it saw the answer must run the turn)
        assert flight.get("answer", (0, {}))[0] == 503 and flight["answer"][1].get("retry") is True, flight
        assert drain <= took < drain + 10, took
        assert "released 1 unfinished webhook claim(s) as the drain ended" in a.output(), a.output()
        status, body = b.webhook({"id": delivery, "text": f"msg={delivery}-retry"})
        assert status == 200 and body.get("action") == "agent" and not body.get("deduplicated"), body
    assert "draining: no new requests; 1 in flight" in a.output(), a.output()


def test_a_replica_restarted_after_sigkill_starts_despite_the_pid_lock_it_left(launch, tmp_path: Path,
                                                                                real_redis: RedisServer) -> None:
    """A SIGKILLed gateway leaves ~/.praisonai/gateway-<host>-<port>.pid on the pod's state volume,
    naming PID 1; in the next container PID 1 is alive, and 0.1.16 refused to start for ever
    (CrashLoopBackOff, found by the exactly-once checker). The launcher clears it."""
    first = launch("killed", documented_config(real_redis))
    lock = next((tmp_path / "killed/home/.praisonai").glob(f"gateway-*-{first.port}.pid"))
    first.proc.kill()
    first.proc.wait(10)
    lock.write_text("1")  # as the lock reads in a container, where the gateway was PID 1
    port = first.port
    again = LaunchedGateway(run_launcher(tmp_path, "killed", documented_config(real_redis), None, port), port,
                            tmp_path / "killed/launcher.log")
    try:
        again.wait_ready()
        assert "removed a stale gateway PID lock" in again.output(), again.output()
    finally:
        assert again.stop() == 0, again.output()



# --------------------------------------------------------------------------
# The switch from one SQLite replica to Redis (issue 18: the backend switch)
# --------------------------------------------------------------------------


def test_migration_copies_recorded_rows_with_their_ttl_left_and_skips_the_rest(tmp_path: Path,
                                                                             real_redis: RedisServer) -> None:
    import sqlite3
    path = tmp_path / "hook_idempotency.sqlite"
    now = 1_800_000_000.0
    with sqlite3.connect(path) as conn:  # 0.1.16's schema
        conn.execute("CREATE TABLE hook_idempotency(key TEXT PRIMARY KEY, ts REAL NOT NULL, status TEXT NOT NULL)")
        conn.executemany("INSERT INTO hook_idempotency VALUES (?, ?, ?)", [
            ("fresh", now - 60, "recorded"), ("expired", now - 86400 - 1, "recorded"),
            ("running", now - 5, "inflight"), ("known", now - 10, "recorded")])
    client = real_redis.client()
    client.set(f"{PREFIX}hookidem:known", "recorded")
    copied, kept = migration.migrate_sqlite_records(str(path), client, PREFIX, time.time(), "tok-1", ttl=86400 + time.time() - now)
    assert (copied, kept) == (1, 1)
    assert client.get(f"{PREFIX}hookidem:fresh") == "recorded"
    assert 86000 * 1000 < client.pttl(f"{PREFIX}hookidem:fresh") <= (86400 - 60) * 1000 + 2000
    assert client.get(f"{PREFIX}hookidem:expired") is None and client.get(f"{PREFIX}hookidem:running") is None
    assert client.get(f"{PREFIX}sqlite-migrated") == "tok-1"


def test_a_webhook_the_single_sqlite_replica_admitted_is_deduplicated_after_the_switch(
        launch, tmp_path: Path, real_redis: RedisServer, llm: StandInLLM) -> None:
    """One replica on SQLite admits a webhook; the same HOME (its state PVC) then starts on Redis
    with the operator's migration token: the record reaches Redis, and the provider's redelivery to
    another Redis replica is answered deduplicated instead of running the agent again."""
    single = documented_config(None)
    single["hooks"]["idempotency"] = {"store_backend": "sqlite"}
    single.pop("turn_lock")
    solo = launch("solo", single)
    assert solo.webhook({"id": "before-switch", "text": "hello"})[0] == 200
    assert solo.stop() == 0, solo.output()
    port = free_port()
    switched = LaunchedGateway(run_launcher(tmp_path, "solo", documented_config(real_redis), llm, port,
                                            {contract.SQLITE_MIGRATION_ENV: "switch-1"}), port,
                               tmp_path / "solo/launcher.log")
    try:
        switched.wait_ready()
        assert "1 copied, 0 already there" in switched.output(), switched.output()
        assert real_redis.client().get(f"{PREFIX}sqlite-migrated") == "switch-1"
        other = launch("other", documented_config(real_redis))
        turns = llm.completions
        assert other.webhook({"id": "before-switch", "text": "hello"}) == (200, {"ok": True, "deduplicated": True})
        assert llm.completions == turns
    finally:
        switched.stop()


# --------------------------------------------------------------------------
# Shared session history (issue 18: conversations must not split between replicas)
# --------------------------------------------------------------------------


def session_config(redis: RedisServer, store: str = "redis", max_messages: int = 50,
                   max_sessions: int = 10_000) -> Dict[str, Any]:
    documented = documented_config(redis)
    documented["hooks"]["hooks"][0]["session_key"] = "{session}"
    documented["session_history"] = {"store": store, "max_messages": max_messages, "ttl_seconds": 3600,
                                     "max_sessions": max_sessions}
    return documented


def turn_of(llm: StandInLLM, msg: str) -> Dict[str, Any]:
    return next(t for t in reversed(llm.turns) if t["msg"] == msg)


@pytest.mark.release_matrix
def test_a_conversation_alternating_between_replicas_sees_its_whole_history(launch, real_redis: RedisServer,
                                                                            llm: StandInLLM) -> None:
    """Turns of one session sent to replica A, B, A, B, ... each reach the model with every earlier
    turn of that session, and with no turn of another session; the history sits in Redis, bounded."""
    a, b = launch("sessions-a", session_config(real_redis)), launch("sessions-b", session_config(real_redis))
    sent: List[str] = []
    for i in range(6):
        msg = f"conv-{i}"
        gw = (a, b)[i % 2]
        status, body = gw.webhook({"id": msg, "session": "s-one", "text": f"msg={msg} session=s-one"})
        assert status == 200 and body.get("action") == "agent", body
        assert turn_of(llm, msg)["history"] == sent, (msg, turn_of(llm, msg))
        sent.append(msg)
        other = f"other-{i}"  # another conversation in between, on the other replica
        assert (b, a)[i % 2].webhook({"id": other, "session": "s-two", "text": f"msg={other} session=s-two"})[0] == 200
        assert turn_of(llm, other)["history"] == [f"other-{j}" for j in range(i)]
    keys = real_redis.client().keys(f"{PREFIX}session:*")
    assert len(keys) == 2 and real_redis.client().llen(keys[0]) == 12, keys  # 6 turns: user + assistant each
    assert "webhook sessions=shared in Redis" in a.output()


def test_a_bounded_history_keeps_the_last_messages_and_replica_keeps_sessions_apart(
        launch, real_redis: RedisServer, llm: StandInLLM) -> None:
    """store: replica keeps each session's history in the replica (nothing in Redis), one per
    session: 0.1.16 alone would give the hook's one Agent history, every conversation mixed."""
    bounded = launch("bounded", session_config(real_redis, max_messages=4))
    for i in range(4):
        assert bounded.webhook({"id": f"b-{i}", "session": "s", "text": f"msg=b-{i} session=s"})[0] == 200
    assert turn_of(llm, "b-3")["history"] == ["b-1", "b-2"]  # the last 4 messages: 2 turns
    local = launch("local", session_config(real_redis, store="replica"))
    solo = session_config(real_redis, store="replica")  # one SQLite replica, no Redis: as the operator renders it
    solo.pop("push"), solo.pop("turn_lock")
    solo["hooks"]["idempotency"] = {"store_backend": "sqlite"}
    alone = launch("solo", solo)
    before = set(real_redis.client().keys(f"{PREFIX}session:*"))
    for gw, name in ((local, "local"), (alone, "solo")):
        assert "webhook sessions=per replica" in gw.output()
        for i in range(2):
            for session in ("p", "q"):
                msg = f"{name}-{session}-{i}"
                assert gw.webhook({"id": msg, "session": session, "text": f"msg={msg} session={session}"})[0] == 200
        assert turn_of(llm, f"{name}-p-1")["history"] == [f"{name}-p-0"], turn_of(llm, f"{name}-p-1")
        assert turn_of(llm, f"{name}-q-1")["history"] == [f"{name}-q-0"]
    assert set(real_redis.client().keys(f"{PREFIX}session:*")) == before
    # two turns of one session at once on the replica: the second waits and sees the first
    import threading
    first = threading.Thread(target=alone.webhook, args=({"id": "solo-r-0", "session": "r",
                                                          "text": "msg=solo-r-0 session=r delay=2"},))
    first.start()
    _wait_until(lambda: any(t["msg"] == "solo-r-0" for t in llm.turns), 20, "the first turn at the stand-in")
    assert alone.webhook({"id": "solo-r-1", "session": "r", "text": "msg=solo-r-1 session=r"})[0] == 200
    first.join(10)
    assert turn_of(llm, "solo-r-1")["history"] == ["solo-r-0"]


def test_past_max_sessions_the_least_recently_used_history_goes_and_the_rest_stay(
        launch, real_redis: RedisServer, llm: StandInLLM) -> None:
    """Session history bounded in count (spec.sessions.maxSessions), so it cannot fill the memory the
    dedup records need: with 2, a third conversation deletes the history of the one least recently
    used, whose next turn starts afresh; the other keeps its whole history, on either replica."""
    a = launch("few-a", session_config(real_redis, max_sessions=2))
    b = launch("few-b", session_config(real_redis, max_sessions=2))
    for gw, msg, session in ((a, "p-0", "p"), (b, "q-0", "q"), (a, "q-1", "q"), (b, "r-0", "r")):
        status, body = gw.webhook({"id": msg, "session": session, "text": f"msg={msg} session={session}"})
        assert status == 200 and body.get("action") == "agent", body
    keys = real_redis.client().keys(f"{PREFIX}session:*")
    assert len(keys) == 2 and real_redis.client().zcard(f"{PREFIX}sessions") == 2, keys
    assert "least recently used session histories deleted" in b.output()
    assert a.webhook({"id": "q-2", "session": "q", "text": "msg=q-2 session=q"})[0] == 200
    assert turn_of(llm, "q-2")["history"] == ["q-0", "q-1"]
    assert b.webhook({"id": "p-1", "session": "p", "text": "msg=p-1 session=p"})[0] == 200
    assert turn_of(llm, "p-1")["history"] == []  # p was the least recently used: it starts afresh


def test_while_redis_is_down_each_session_keeps_its_own_history_on_the_replica(
        launch, real_redis: RedisServer, llm: StandInLLM) -> None:
    """Redis stopped: a replica runs each session's turns on its own last copy of that session's
    history (never 0.1.16's one agent history, which mixes every session of the hook), and keeps
    serving; once Redis is back the shared history is used again. (Past the fail-closed window:
    with failClosedSeconds 0 the replica admits at once.)"""
    documented = session_config(real_redis)
    documented["idempotency_guard"] = {"fail_closed_seconds": 0}
    gw = launch("outage", documented)
    assert gw.webhook({"id": "o-0", "session": "s", "text": "msg=o-0 session=s"})[0] == 200  # reaches Redis
    real_redis.stop()
    for i in (1, 2):
        assert gw.webhook({"id": f"o-{i}", "session": "s", "text": f"msg=o-{i} session=s"})[0] == 200
        assert gw.webhook({"id": f"x-{i}", "session": "t", "text": f"msg=x-{i} session=t"})[0] == 200
    assert turn_of(llm, "o-2")["history"] == ["o-0", "o-1"]
    assert turn_of(llm, "x-2")["history"] == ["x-1"]
    assert "shared session history unavailable" in gw.output()


def test_what_a_turn_added_while_redis_was_paused_reaches_the_shared_history_once_it_answers(
        launch, real_redis: RedisServer, llm: StandInLLM) -> None:
    """A turn whose end falls in a Redis pause cannot append to the shared history; the replica keeps
    what it added and writes it back once Redis answers, so the session's next turn, on another
    replica, sees it (before: a split, the checker's "history written where no one reads it")."""
    a, b = launch("wb-a", session_config(real_redis)), launch("wb-b", session_config(real_redis))
    assert a.webhook({"id": "wb-0", "session": "s", "text": "msg=wb-0 session=s"})[0] == 200
    flight = _turn_in_flight(a, llm, "wb-1", 3, session="s")
    real_redis.pause()
    try:
        flight["thread"].join(20)
    finally:
        time.sleep(1)
        real_redis.resume()
    assert flight.get("answer", (None,))[0] == 200, flight
    _wait_until(lambda: "wrote back to the shared history" in a.output(), 15, "the write-back")
    assert b.webhook({"id": "wb-2", "session": "s", "text": "msg=wb-2 session=s"})[0] == 200
    assert turn_of(llm, "wb-2")["history"] == ["wb-0", "wb-1"], turn_of(llm, "wb-2")


def test_turns_of_one_session_on_two_replicas_at_once_run_one_after_the_other(launch, real_redis: RedisServer,
                                                                             llm: StandInLLM) -> None:
    """Two deliveries of one conversation at the same moment, one per replica: the session's lock
    makes the second wait for the first, so the second's history holds the first."""
    import threading
    a, b = launch("lock-a", session_config(real_redis)), launch("lock-b", session_config(real_redis))
    first = threading.Thread(target=a.webhook, args=({"id": "l-1", "session": "s", "text": "msg=l-1 session=s delay=2"},))
    first.start()
    _wait_until(lambda: any(t["msg"] == "l-1" for t in llm.turns), 20, "the first turn at the stand-in")
    assert b.webhook({"id": "l-2", "session": "s", "text": "msg=l-2 session=s"})[0] == 200
    first.join(10)
    assert turn_of(llm, "l-2")["history"] == ["l-1"]
    assert turn_of(llm, "l-2")["started"] >= turn_of(llm, "l-1")["ended"]


def test_the_shared_history_is_encrypted_at_rest_with_the_packages_own_store(tmp_path: Path, real_redis: RedisServer,
                                                                            llm: StandInLLM) -> None:
    """With GATEWAY_SESSION_KEY (a Secret the operator generates) the history goes through
    praisonaiagents' EncryptedSessionStore: Redis holds only ciphertext of the content, the model
    still gets the whole history, and the key is in no log line. A key that is not a Fernet key is
    a fatal config error (78), not a crash loop."""
    from praisonaiagents.session.encrypted_store import generate_session_key
    key = generate_session_key()
    port = free_port()
    gw = LaunchedGateway(run_launcher(tmp_path, "encrypted", session_config(real_redis), llm, port,
                                      {contract.SESSION_KEY_ENV: key}), port, tmp_path / "encrypted/launcher.log")
    try:
        gw.wait_ready()
        for i in range(2):
            assert gw.webhook({"id": f"e-{i}", "session": "secret-talk", "text": f"msg=e-{i} session=secret-talk "
                                                                                 "my card is 4111"})[0] == 200
        assert turn_of(llm, "e-1")["history"] == ["e-0"]
        (stored,) = real_redis.client().keys(f"{PREFIX}session:*")
        rows = [json.loads(r) for r in real_redis.client().lrange(stored, 0, -1)]
        assert [r["role"] for r in rows] == ["user", "assistant"] * 2
        assert all(r["content"].startswith("praisonai:enc:v1:") for r in rows), rows
        assert "4111" not in json.dumps(rows) and "secret-talk" not in stored  # the session key is hashed
        assert "(encrypted)" in gw.output() and key not in gw.output()
    finally:
        gw.stop()
    bad = run_launcher(tmp_path, "bad-key", session_config(real_redis), llm, free_port(),
                       {contract.SESSION_KEY_ENV: "not-a-fernet-key"})
    assert bad.wait(60) == 78
    assert "is not a Fernet key" in (tmp_path / "bad-key/launcher.log").read_text()


@pytest.mark.release_matrix
def test_a_job_declared_in_gateway_yaml_runs_once_across_two_replicas_not_once_on_each(
        launch, real_redis: RedisServer, llm: StandInLLM) -> None:
    """0.1.16 loads ``schedules:`` into each replica's own store and each replica's tick (at start, then
    every 15 s) fires it: an hourly job ran at each start, once per replica. Over the shared store
    one replica claims it and the other finds it claimed."""
    cfg = documented_config(real_redis)
    cfg["schedules"] = {"hourly-report": {"prompt": "msg=sched-hourly the hourly report", "every": "1h"}}
    a = launch("replica-a", cfg)
    b = launch("replica-b", cfg)
    ran = lambda: [t for t in llm.turns if t["msg"] == "sched-hourly"]  # noqa: E731
    _wait_until(lambda: ran(), 20.0, "the hourly job's first run")
    stays(lambda: len(ran()) == 1, 17.0, what="one run of the hourly job (each replica ticked since)")
    job = json.loads(real_redis.client().get(f"{PREFIX}gwop-schedules"))["schedules"]
    assert [(j["name"], j["run_count"]) for j in job.values()] == [("hourly-report", 1)], job
    for gw in (a, b):
        assert "scheduled jobs=shared in Redis" in gw.output()
        assert gw.stop() == 0, gw.output()


def test_a_hung_redis_holds_the_replicas_requests_at_most_half_a_second_per_schedule_tick(
        launch, real_redis: RedisServer) -> None:
    """0.1.16's scheduler tick calls the schedule store on the gateway's event loop: with the store in
    Redis, a tick during a hung Redis holds every request of the replica until the store gives up
    (gwop_schedules.TIMEOUT_S). GET /health, sampled through two ticks of a paused Redis, answers
    within a second each time."""
    gw = launch("replica-a", documented_config(real_redis))
    gw.health()
    real_redis.pause()
    slowest = 0.0
    try:
        deadline = time.monotonic() + 32.0  # two ticks (every 15 s) at least
        while time.monotonic() < deadline:
            started = time.monotonic()
            gw.health()
            slowest = max(slowest, time.monotonic() - started)
            time.sleep(0.1)
    finally:
        real_redis.resume()
    assert slowest < 1.0, f"GET /health took {slowest:.2f}s while Redis was paused"
    assert "shared store cannot be used" in gw.output()  # the ticks did ask Redis


def test_a_replica_killed_mid_turn_has_its_claims_released_by_the_next_process_in_its_pod(
        tmp_path: Path, real_redis: RedisServer, llm: StandInLLM) -> None:
    """SIGKILL (OOM, a liveness kill, the checker's kill_pod) leaves no chance to release: the turn's
    claim would answer retries ``deduplicated`` for 900 s. The next gateway process of the same pod
    (HOSTNAME) releases its predecessor's claims at start, so the provider's retry runs the turn."""
    env = {"HOSTNAME": "eo-bot-abc12"}
    port = free_port()
    first = LaunchedGateway(run_launcher(tmp_path, "pod", documented_config(real_redis), llm, port, env), port,
                            tmp_path / "pod/launcher.log")
    try:
        first.wait_ready()
        assert first.webhook({"id": "warm", "text": "hi"})[0] == 200  # 0.1.16 builds its store on the first webhook
        owner = f"{PREFIX}hookidem-owner:eo-bot-abc12"
        _wait_until(lambda: real_redis.client().get(owner) is not None, 20, "the owner token recorded")
        flight = _turn_in_flight(first, llm, "killed-turn", 60)
    finally:
        first.proc.kill()
        first.proc.wait(10)
    flight["thread"].join(10)
    assert "answer" not in flight
    stuck = [k for k in real_redis.client().keys(f"{PREFIX}hookidem:*")  # its claims' tokens start with it
             if str(real_redis.client().get(k)).startswith(real_redis.client().get(owner))]
    assert len(stuck) == 1, stuck  # the killed turn's claim, as 0.1.16 leaves it
    again = LaunchedGateway(run_launcher(tmp_path, "pod", documented_config(real_redis), llm, port, env), port,
                            tmp_path / "pod/launcher.log")
    try:
        again.wait_ready()
        assert "released 1 webhook claim(s) a killed predecessor" in again.output(), again.output()
        status, body = again.webhook({"id": "killed-turn", "text": "msg=killed-turn-retry"})
        assert status == 200 and body.get("action") == "agent" and not body.get("deduplicated"), body
    finally:
        again.stop()


@pytest.mark.release_matrix
def test_a_holder_killed_mid_turn_frees_its_claim_within_its_lease_and_the_retry_runs_elsewhere(
        launch, real_redis: RedisServer, llm: StandInLLM) -> None:
    """A replica that dies without its drain and never comes back (a force delete, a lost node: no
    process of its pod starts again to release what it held): its claim carries a lease of
    claimLeaseSeconds, not 0.1.16's 900 s, so the provider's retry to another replica is told to
    retry (503) until the lease ends and then runs the message, once."""
    guard = {"claim_lease_seconds": 10}
    a = launch("doomed", documented_config(real_redis, guard=guard), {"HOSTNAME": "eo-bot-doomed"})
    b = launch("survivor", documented_config(real_redis, guard=guard), {"HOSTNAME": "eo-bot-survivor"})
    flight = _turn_in_flight(a, llm, "orphaned", 120)
    client = real_redis.client()
    claims = [k for k in client.keys(f"{PREFIX}hookidem:*") if client.get(k) != "recorded"]
    assert len(claims) == 1, claims  # the turn's claim (the key is the hook's digest of the id)
    key = claims[0]
    assert str(client.get(key)).startswith("eo-bot-doomed:")  # the claim names its holder
    a.proc.kill()
    a.proc.wait(10)
    killed = time.monotonic()
    assert 0 < client.pttl(key) <= 10_000
    status, body = b.webhook({"id": "orphaned", "text": "msg=orphaned delay=0"})
    assert status == 503 and body.get("in_progress") is True, body

    _wait_until(_runs_when_retried(b, "orphaned"), 20, "the retry run on the surviving replica")
    freed = time.monotonic() - killed
    print(f"a killed holder's claim freed and run elsewhere after {freed:.1f} s (lease 10 s)")
    assert freed < 10 + 3
    flight["thread"].join(5)
    assert [t["msg"] for t in llm.turns if t["answered"]].count("orphaned") == 1


def test_a_turn_longer_than_its_lease_keeps_its_claim_while_it_runs(
        launch, real_redis: RedisServer, llm: StandInLLM) -> None:
    """The holder renews its claim every third of the lease while the turn runs: a 14 s turn under a
    10 s lease is still "in progress" to a retry 12 s into it, and runs once."""
    guard = {"claim_lease_seconds": 10}
    a = launch("slow", documented_config(real_redis, guard=guard), {"HOSTNAME": "eo-bot-slow"})
    b = launch("other", documented_config(real_redis, guard=guard), {"HOSTNAME": "eo-bot-other"})
    started = time.monotonic()
    flight = _turn_in_flight(a, llm, "long-turn", 14)  # under the client's 15 s timeout
    _wait_until(lambda: time.monotonic() - started > 12, 20, "12 s into the turn, past the first lease")
    status, body = b.webhook({"id": "long-turn", "text": "msg=long-turn delay=0"})
    assert status == 503 and body.get("in_progress") is True, body
    flight["thread"].join(30)
    assert flight["answer"][0] == 200 and flight["answer"][1].get("action") == "agent", flight
    assert b.webhook({"id": "long-turn", "text": "msg=long-turn delay=0"}) == (200, {"ok": True, "deduplicated": True})
    assert [t["msg"] for t in llm.turns if t["answered"]].count("long-turn") == 1


def test_a_lease_lost_mid_turn_is_told_in_health_with_when(
        launch, real_redis: RedisServer, llm: StandInLLM) -> None:
    """A turn whose claim went while it ran (here deleted, as a flush or a lease run out while Redis
    was unusable would) leaves a webhook Redis may never record: the replica says how many and
    when in /health, so that the operator keeps the window (AdmissionsNotRecorded)."""
    guard = {"claim_lease_seconds": 10}  # renewed every 3.3 s
    gw = launch("lost", documented_config(real_redis, guard=guard), {"HOSTNAME": "eo-bot-lost"})
    before = time.time()
    flight = _turn_in_flight(gw, llm, "lost-claim", 8)
    admin = real_redis.client()
    claims = lambda: [k for k in admin.keys("*hookidem:*")  # noqa: E731 - the token names the pod
                      if str(admin.get(k) or "").startswith("eo-bot-lost:")]
    _wait_until(lambda: bool(claims()), 5, "the turn's claim in Redis")
    admin.delete(*claims())
    own = lambda: gw.health()["gateway_operator"]["idempotency"]  # noqa: E731
    _wait_until(lambda: own()["leases_lost"] == 1, 6, "the renewal finding the claim gone")
    # /health rounds it to a tenth of a second: either way by up to 0.05 s
    assert before - 0.05 <= own()["last_unrecorded_at"] <= time.time() + 0.05, own()
    flight["thread"].join(30)
    assert "a webhook claim's lease was lost while its turn ran" in gw.output(), gw.output()


@pytest.mark.release_matrix
def test_every_private_name_the_launcher_relies_on_is_there_in_this_release() -> None:
    """What the pod code relies on in praisonai-bot 0.1.16 / praisonaiagents 1.7.17 that no public
    API offers, as the launcher checks it at every start (gwop_upstream.REQUIREMENTS)."""
    assert upstream.missing() == []
    assert upstream.versions() == RUNNING
    if not os.environ.get("PYTHONPATH"):  # the venv's pinned release is the one the launcher was written for
        assert RUNNING == upstream.WRITTEN_FOR
    # the Redis store's owner token, prefix and client (claims are released by that token)
    from praisonai_bot.bots._idempotency import RedisIdempotencyStore
    store = upstream.RedisStore(RedisIdempotencyStore(object(), prefix="p:hookidem:"))
    assert len(store.token) == 32 and store.prefix == "p:hookidem:" and store.key("k") == "p:hookidem:k"
    assert store.inflight_ms == 900_000 and not store.degraded()


def _plants() -> List[Tuple[str, Callable[[pytest.MonkeyPatch], None]]]:
    """For each requirement, the smallest upstream change that breaks it (a rename, a handler that
    stops calling the hook, a constructor that no longer sets the attribute)."""
    import praisonaiagents
    import redis.asyncio.connection as async_connection
    import redis.connection as sync_connection
    import uvicorn
    from praisonai_bot.bots._idempotency import RedisIdempotencyStore as Store
    from praisonai_bot.gateway.port_utils import GatewayPIDLock
    from praisonai_bot.gateway.server import WebSocketGateway as Gateway
    from praisonaiagents.gateway.hooks import HookConfig
    from praisonaiagents.scheduler.config_store import ConfigYamlScheduleStore as ScheduleStore
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    def schedule_reload_renamed(mp: pytest.MonkeyPatch) -> None:
        def _reload_locked(self: Any) -> None:  # the jobs kept under another name
            self._schedules = {}
            self._job_state = {}
            self._load()
        mp.setattr(ScheduleStore, "_reload_locked", _reload_locked)

    def store_without_token(mp: pytest.MonkeyPatch) -> None:
        init = Store.__init__

        def renamed(self: Any, *args: Any, **kwargs: Any) -> None:
            init(self, *args, **kwargs)
            self._owner_token = self.__dict__.pop("_token")
        mp.setattr(Store, "__init__", renamed)

    def gateway_init_without_idem(mp: pytest.MonkeyPatch) -> None:
        def init(self: Any, config: Any = None) -> None:
            self._server = None
            self._hook_idempotency_ttl = 86_400.0
            self._idempotency = None
        mp.setattr(Gateway, "__init__", init)

    def gateway_init_without_ttl(mp: pytest.MonkeyPatch) -> None:
        def init(self: Any, config: Any = None) -> None:
            self._server = None
            self._hook_idem = None
            self._hook_idempotency_seconds = 86_400.0
        mp.setattr(Gateway, "__init__", init)

    def gateway_init_without_server(mp: pytest.MonkeyPatch) -> None:
        def init(self: Any, config: Any = None) -> None:
            self._hook_idem = None
            self._hook_idempotency_ttl = 86_400.0
            self._uvicorn = None
        mp.setattr(Gateway, "__init__", init)

    def store_ttl_renamed(mp: pytest.MonkeyPatch) -> None:
        init = Store.__init__

        def renamed(self: Any, client: Any, *, prefix: str = "praison:hookidem:", ttl: float = 86_400.0,
                    inflight_lease_seconds: float = 900.0) -> None:
            init(self, client, prefix=prefix, ttl_seconds=ttl, inflight_lease_seconds=inflight_lease_seconds)
        mp.setattr(Store, "__init__", renamed)

    def degraded_signature(mp: pytest.MonkeyPatch) -> None:
        def mark(self: Any, error: Exception) -> None:
            self._runtime_degraded = True
        mp.setattr(Store, "_mark_runtime_degraded", mark)

    def handler_calls_the_store(mp: pytest.MonkeyPatch) -> None:
        async def start(self: Any) -> None:  # the handler reserves on the store itself
            routes = [Route("/health", lambda request: JSONResponse(self.health()))]
            if not self._get_hook_idem_store().reserve("k") and routes:
                return None
        mp.setattr(Gateway, "start", start)

    def health_answered_elsewhere(mp: pytest.MonkeyPatch) -> None:
        async def start(self: Any) -> None:  # /health no longer answers self.health()
            routes = [Route("/health", lambda request: JSONResponse(self.health_snapshot())),
                      Route("/hooks/{path:path}", None)]
            if self._hook_reserve("k") and routes:
                self._hook_record("k")
            else:
                self._hook_release("k")
        mp.setattr(Gateway, "start", start)

    def degraded_renamed(mp: pytest.MonkeyPatch) -> None:
        def mark(self: Any, op: str, error: Exception) -> None:
            self._degraded_at_runtime = True
        mp.setattr(Store, "_mark_runtime_degraded", mark)

    def history_renamed(mp: pytest.MonkeyPatch) -> None:
        class Agent:
            def __init__(self) -> None:
                self.__history_state: List[Any] = []
        mp.setattr(praisonaiagents, "Agent", Agent)

    def pid_lock_renamed(mp: pytest.MonkeyPatch) -> None:
        def init(self: Any, lock_dir: Any = None, host: str = "127.0.0.1", port: int = 8765) -> None:
            self.lock_file = f"praisonai-gateway-{host}-{port}.lock"
        mp.setattr(GatewayPIDLock, "__init__", init)

    def renamed_in_hierarchy(cls: Any, name: str) -> Callable[[pytest.MonkeyPatch], None]:
        def plant(mp: pytest.MonkeyPatch) -> None:
            for klass in cls.__mro__:
                if name in vars(klass):
                    mp.delattr(klass, name)
        return plant

    class Config:  # an uvicorn without the graceful-shutdown bound
        def __init__(self, app: Any) -> None:
            self.app = app

    return [
        ("WebSocketGateway._run_hook(hook, payload)", lambda mp: mp.delattr(Gateway, "_run_hook")),
        ("WebSocketGateway._dispatch_agent_turn (static)",
         lambda mp: mp.setattr(Gateway, "_dispatch_agent_turn", lambda self, agent, content: None)),
        ("WebSocketGateway._hook_reserve", lambda mp: mp.delattr(Gateway, "_hook_reserve")),
        ("WebSocketGateway._hook_record", lambda mp: mp.delattr(Gateway, "_hook_record")),
        ("WebSocketGateway._hook_release", lambda mp: mp.delattr(Gateway, "_hook_release")),
        ("the /hooks/ handler calls self._hook_reserve/_hook_record/_hook_release", handler_calls_the_store),
        ("the /health route answers self.health()", health_answered_elsewhere),
        ("WebSocketGateway._get_hook_idem_store", lambda mp: mp.delattr(Gateway, "_get_hook_idem_store")),
        ("WebSocketGateway._hook_idem", gateway_init_without_idem),
        ("WebSocketGateway._hook_idempotency_ttl", gateway_init_without_ttl),
        ("WebSocketGateway._get_hook_idem_store builds the store with ttl_seconds=self._hook_idempotency_ttl",
         lambda mp: mp.setattr(Gateway, "_get_hook_idem_store", lambda self: self._hook_idem)),
        ("WebSocketGateway._server (uvicorn.Server)", gateway_init_without_server),
        ("RedisIdempotencyStore._client/_prefix/_token/_ttl_ms/_inflight_ms", store_without_token),
        ("RedisIdempotencyStore._redis_key", lambda mp: mp.delattr(Store, "_redis_key")),
        ("RedisIdempotencyStore._RECORD_LUA/_RELEASE_LUA/_RECORDED", lambda mp: mp.delattr(Store, "_RECORD_LUA")),
        ("RedisIdempotencyStore._RECORD_LUA/_RELEASE_LUA/_RECORDED", lambda mp: mp.delattr(Store, "_RELEASE_LUA")),
        ("RedisIdempotencyStore(client, prefix=, ttl_seconds=)", store_ttl_renamed),
        ("RedisIdempotencyStore._mark_runtime_degraded(op, error) / _runtime_degraded", degraded_renamed),
        ("RedisIdempotencyStore._mark_runtime_degraded(op, error) / _runtime_degraded", degraded_signature),
        ("RedisIdempotencyStore._mark_runtime_recovered", lambda mp: mp.delattr(Store, "_mark_runtime_recovered")),
        ("praisonai_bot.bots._session.record_durability_degraded(component, *, reason)",
         lambda mp: mp.setattr(__import__("praisonai_bot.bots._session").bots._session, "record_durability_degraded",
                               lambda kind, *, why: None)),
        ("Agent.__chat_history_state (AsyncSafeState)", history_renamed),
        ("HookConfig.resolve_session_key", lambda mp: mp.delattr(HookConfig, "resolve_session_key")),
        ("uvicorn.Config.timeout_graceful_shutdown", lambda mp: mp.setattr(uvicorn, "Config", Config)),
        ("GatewayPIDLock: ~/.praisonai/gateway-<host>-<port>.pid", pid_lock_renamed),
        ("praisonaiagents ConfigYamlScheduleStore._file_lock/_load/_save/_reload_locked/_jobs/_job_state",
         lambda mp: mp.delattr(ScheduleStore, "_file_lock")),
        ("praisonaiagents ConfigYamlScheduleStore._file_lock/_load/_save/_reload_locked/_jobs/_job_state",
         schedule_reload_renamed),
        ("praisonai_bot.scheduler.config_loader._CONFIG_JOB_PREFIX",
         lambda mp: mp.delattr(__import__("praisonai_bot.scheduler.config_loader").scheduler.config_loader,
                               "_CONFIG_JOB_PREFIX")),
        ("redis-py SSLConnection._wrap_socket_with_ssl / async _connection_arguments",
         renamed_in_hierarchy(async_connection.SSLConnection, "_connection_arguments")),
        ("redis-py SSLConnection._wrap_socket_with_ssl / async _connection_arguments",
         renamed_in_hierarchy(sync_connection.SSLConnection, "_wrap_socket_with_ssl")),
    ]


def test_every_requirement_has_a_planted_change() -> None:
    assert sorted({what for what, _ in _plants()}) == sorted(r.what for r in upstream.REQUIREMENTS)


@pytest.mark.parametrize("what, plant", _plants(), ids=[f"{i}-{what.split()[0]}" for i, (what, _) in enumerate(_plants())])
@pytest.mark.release_matrix
def test_a_release_that_moved_one_private_name_is_refused_naming_it(
        what: str, plant: Callable[[pytest.MonkeyPatch], None], monkeypatch: pytest.MonkeyPatch) -> None:
    """Each planted change makes the start-up check name exactly that requirement, and the start is
    refused with the versions found and the ones the launcher was written for."""
    plant(monkeypatch)
    assert upstream.missing() == [what]
    with pytest.raises(upstream.UpstreamMismatch, match="refusing to start") as refused:
        upstream.check()
    assert what in str(refused.value) and "praisonai-bot 0.1.16" in str(refused.value)


@pytest.mark.release_matrix
def test_a_gateway_that_moved_a_private_name_exits_78_naming_it_and_the_versions(tmp_path: Path) -> None:
    """The start-up check in the pod's own process: the launcher, run over a praisonai-bot whose Redis
    store lost ``_RECORD_LUA``, refuses to start (exit 78: the kubelet's restarts cannot help) with one
    line naming the name and the versions, before the gateway serves anything."""
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump(documented_config(None)))
    planted = ("import runpy, sys; sys.path.insert(0, sys.argv[1]); "
               "from praisonai_bot.bots._idempotency import RedisIdempotencyStore as S; del S._RECORD_LUA; "
               "sys.argv = sys.argv[2:]; runpy.run_path(sys.argv[0], run_name='__main__')")
    home = tmp_path / "home"
    home.mkdir()
    proc = subprocess.run([sys.executable, "-c", planted, str(pod_code.POD_CODE), str(pod_code.LAUNCH),
                           "--config", str(config), "--workdir", str(tmp_path / "work"), "--port", str(free_port())],
                          env=_gateway_env(home, None), capture_output=True, text=True, timeout=60)
    lines = [line for line in proc.stderr.splitlines() if line.startswith("gateway-launcher:")]
    assert proc.returncode == 78, proc.stderr
    assert lines == [
        f"gateway-launcher: unsupported gateway: this gateway ({RUNNING_LINE}) lacks "
        "what the launcher relies on: RedisIdempotencyStore._RECORD_LUA/_RELEASE_LUA/_RECORDED (written for praisonai-bot 0.1.16, "
        "praisonaiagents 1.7.17); refusing to start rather than run without exactly-once"], proc.stderr


@pytest.mark.release_matrix
def test_a_duplicate_of_a_turn_still_in_flight_is_told_to_retry_not_that_it_was_deduplicated(
        launch, real_redis: RedisServer, llm: StandInLLM) -> None:
    """0.1.16 answers a delivery whose key is in flight 200 ``deduplicated``: the provider stops, and
    if that turn then fails the message is lost. In flight: 503 with Retry-After; recorded: 200
    deduplicated; released (the turn failed, or its replica stopped): the retry runs it."""
    a, b = launch("inflight-a", documented_config(real_redis)), launch("inflight-b", documented_config(real_redis))
    for name, gw in (("a", a), ("b", b)):
        assert gw.webhook({"id": f"warm-{name}", "text": "hi"})[0] == 200
    flight = _turn_in_flight(a, llm, "slow-one", 4)
    status, body = b.webhook({"id": "slow-one", "text": "msg=slow-one-copy"})
    assert (status, body.get("in_progress")) == (503, True), (status, body)
    flight["thread"].join(20)
    assert flight["answer"][0] == 200
    assert b.webhook({"id": "slow-one", "text": "msg=slow-one-copy"}) == (200, {"ok": True, "deduplicated": True})
    assert sum(t["msg"] == "slow-one" for t in llm.turns) == 1


def test_the_migration_waits_for_a_redis_that_starts_with_the_switch(tmp_path: Path) -> None:
    """The switch often enables a managed Redis in the same change, so the migrating replica can
    start first: it tries again until Redis answers, and gives up (exit 75, restarted) after its wait."""
    import threading
    server = RedisServer(password=REDIS_PASSWORD)
    settings = {"host": "127.0.0.1", "port": server.port, "password": REDIS_PASSWORD, "prefix": PREFIX}
    with pytest.raises(migration.MigrationPending, match="within 1s"):
        migration.migrate_before_start(settings, "redis", str(tmp_path), "tok", wait=1)
    threading.Timer(3, server.start).start()
    try:
        migration.migrate_before_start(settings, "redis", str(tmp_path), "tok-2", wait=30)
        assert server.client().get(f"{PREFIX}sqlite-migrated") == "tok-2"
        assert entry.exit_code_for(migration.MigrationPending("x")) == entry.EXIT_RESTART
    finally:
        server.close()


def test_the_stand_ins_record_says_unanswered_when_the_caller_hung_up_during_a_slow_turn(llm: StandInLLM) -> None:
    """The checker's record of a turn (harness/llm_standin.py): a caller whose connection ended
    while the model 'thinks' was never answered; one that waits was. A gateway pod stopped mid-turn
    sends its FIN and then nothing more (its network namespace is gone, so no RST answers a later
    write, and that write succeeds): the caller here ends its side (FIN) and keeps the socket, so a
    record decided by whether the write failed would say answered (seen in a rollout of a 200 s turn)."""
    import socket as socket_module
    from urllib.parse import urlsplit
    address = urlsplit(llm.base_url)

    def request(msg: str, hang_up_after: Optional[float]) -> None:
        body = json.dumps({"model": "gpt-4o-mini", "messages": [
            {"role": "user", "content": f"msg={msg} session=s delay=1.5"}]}).encode()
        with socket_module.create_connection((address.hostname, address.port), timeout=10) as conn:
            conn.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            if hang_up_after is None:
                assert b"stand-in reply" in conn.recv(65536) or b"stand-in reply" in conn.recv(65536)
            else:
                time.sleep(hang_up_after)
                conn.shutdown(socket_module.SHUT_WR)
                time.sleep(2.0)  # past the turn's end: the stand-in's write would succeed

    request("hung-up", 0.3)
    request("waited", None)
    # the stand-in records a turn's end after its last write, which the caller may see first
    _wait_until(lambda: all(turn_of(llm, m)["ended"] is not None for m in ("hung-up", "waited")), 10, "both turns' ends")
    assert (turn_of(llm, "hung-up")["answered"], turn_of(llm, "waited")["answered"]) == (False, True)


# --------------------------------------------------------------------------
# Your own Redis (issue 20): TLS with a private CA and a server name, an ACL user
# --------------------------------------------------------------------------

TLS_NAME = "redis.test.internal"  # the certificate's only name; the gateway reaches it as 127.0.0.1
ACL_USER = "gw-tenant"


@pytest.fixture
def acl_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """TLS-only, the ACL user with exactly the least-privilege rules (redis_acl.rules)."""
    from gateway_operator.api import redis_acl
    from harness.tls import make_ca, server_cert
    ca = make_ca(tmp_path / "ca")
    server = RedisServer(password="admin-only", tls=server_cert(ca, tmp_path / "cert", dns=(TLS_NAME,), ips=()),
                         users={ACL_USER: redis_acl.rules(PREFIX, password=REDIS_PASSWORD)}).start()
    yield server
    server.close()


def own_redis_config(redis: RedisServer) -> Dict[str, Any]:
    """push.redis exactly as the operator renders it for spec.redis with host, tls (caSecretRef,
    serverName) and usernameSecretRef; only the CA's path differs (the pod's is a Secret volume)."""
    from gateway_operator import api
    from gateway_operator.api import GatewaySpec
    from gateway_operator.api.redis_target import resolve
    from gateway_operator.core.render.gateway_config import gateway_config
    from gateway_operator.core.render.names import Owner
    spec = GatewaySpec.parse({"image": "x", "replicas": 2, "config": {"hooks": {"idempotency": {
        "store_backend": "redis"}}}, "redis": {
        "host": "127.0.0.1", "port": redis.port, "prefix": PREFIX, "passwordSecretRef": {"name": "login"},
        "usernameSecretRef": {"name": "login"},
        "tls": {"enabled": True, "caSecretRef": {"name": "ca"}, "serverName": TLS_NAME}}})
    rendered = gateway_config(Owner("gw", "testns", "uid"), spec, resolve(spec.redis, "testns", "gw"))
    push = rendered["push"]["redis"]
    assert redis.tls is not None
    push["url"] = push["url"].replace(f"{api.REDIS_CA_DIR}/{api.REDIS_CA_FILE}", str(redis.tls.ca_path))
    documented = session_config(redis)
    documented["push"] = {"redis": push}
    return documented


@pytest.mark.release_matrix
def test_two_replicas_dedup_and_share_sessions_over_tls_as_the_least_privilege_acl_user(
        launch, acl_redis: RedisServer, llm: StandInLLM) -> None:
    env = {"GATEWAY_REDIS_USERNAME": ACL_USER}
    a = launch("tls-a", own_redis_config(acl_redis), env)
    b = launch("tls-b", own_redis_config(acl_redis), env)
    before = llm.completions
    for name, gw in (("a", a), ("b", b)):  # each replica builds its store on its first webhook
        status, body = gw.webhook({"id": f"warm-{name}", "session": f"w-{name}", "text": "hello"})
        assert (status, body.get("action")) == (200, "agent"), body
        assert gw.idempotency_owners() == [], gw.health().get("degraded_owners")
    assert a.webhook({"id": "tls-1", "session": "s", "text": "msg=tls-1 session=s"})[1].get("action") == "agent"
    assert b.webhook({"id": "tls-1", "session": "s", "text": "msg=tls-1 session=s"}) == \
        (200, {"ok": True, "deduplicated": True})
    status, body = b.webhook({"id": "tls-2", "session": "s", "text": "msg=tls-2 session=s"})
    assert (status, body.get("action")) == (200, "agent"), body
    assert turn_of(llm, "tls-2")["history"] == ["tls-1"]  # the session's history, shared over TLS
    assert llm.completions - before == 4
    # nothing the gateway, its launcher or redis-py ran was refused to the user
    assert acl_redis.acl_log() == [], acl_redis.acl_log()
    for gw in (a, b):
        assert gw.stop() == 0, gw.output()
        assert REDIS_PASSWORD not in gw.output() and ACL_USER not in gw.output()
        assert "redis=rediss://127.0.0.1" in gw.output() and "webhook sessions=shared in Redis" in gw.output()
    assert acl_redis.acl_log() == []  # the stop's release of unfinished claims too (SCAN, EVAL)


def test_without_one_command_the_gateway_fails_open_and_the_probe_names_it(
        launch, acl_redis: RedisServer, llm: StandInLLM) -> None:
    """The ACL minus EVAL (the record and release scripts): webhooks are still answered (the
    gateway fails open, as documented), /health says the store is degraded, and the operator's
    probe, signing in as the same user, refuses to let a second replica scale out."""
    import asyncio

    from gateway_operator.api import reasons, redis_acl
    from gateway_operator.api import SecretKeyRef, TLSOptions
    from gateway_operator.api.redis_target import RedisTarget
    from gateway_operator.clients.redis_connection import Credentials
    from gateway_operator.clients.redis_guard import Allowlist
    from gateway_operator.clients.redis_probe import Prober

    acl_redis.set_user(ACL_USER, redis_acl.rules(PREFIX, password=REDIS_PASSWORD).replace(" +eval", ""))
    gw = launch("no-eval", own_redis_config(acl_redis), {"GATEWAY_REDIS_USERNAME": ACL_USER})
    status, body = gw.webhook({"id": "no-eval-1", "session": "s", "text": "msg=no-eval-1 session=s"})
    assert (status, body.get("action")) == (200, "agent"), body  # fail open: the turn ran
    owners = gw.idempotency_owners()
    assert owners and owners[0]["state"] != "healthy", gw.health()
    assert "eval" in {entry["object"] for entry in acl_redis.acl_log()}
    assert REDIS_PASSWORD not in gw.output()

    assert acl_redis.tls is not None
    target = RedisTarget("127.0.0.1", acl_redis.port, 0, True, PREFIX, SecretKeyRef("login", "password"),
                         username_ref=SecretKeyRef("login", "username"),
                         tls_options=TLSOptions(SecretKeyRef("ca", "ca.crt"), TLS_NAME))
    result = asyncio.run(Prober(allowlist=Allowlist.parse(["127.0.0.1/32"])).probe(
        "testns", target, Credentials(REDIS_PASSWORD, ACL_USER, acl_redis.tls.ca_pem), 2.0))
    assert (result.ok, result.reason) == (False, reasons.COMMAND_NOT_PERMITTED), result.message
    assert "refused EVAL to the user" in result.message and ACL_USER not in result.message


# --------------------------------------------------------------------------
# Claims fenced to their turn (issue 56)
# --------------------------------------------------------------------------


def _answered(llm: StandInLLM, msg: str) -> int:
    return [t["msg"] for t in llm.turns if t["answered"]].count(msg)


def test_a_turn_admitted_around_an_outage_keeps_its_claim_after_redis_answers(
        launch, real_redis: RedisServer, llm: StandInLLM) -> None:
    """Hole 1 of issue 56. A delivery held by the fail-closed window leaves a claim queued in a paused
    Redis; its retry to the same replica after the window is admitted best-effort and its turn runs
    on. When Redis answers, the queued claim lands; the journal must make the running turn's claim
    its own (held and renewed) instead of writing nothing and then releasing the held delivery's
    claim, which left the key free while the turn ran: a redelivery to another replica ran it again."""
    from gateway_operator.core.render.gateway_config import REDIS_CLIENT_OPTIONS
    guard = {"fail_closed_seconds": 2, "claim_lease_seconds": 10}
    documented = documented_config(real_redis, guard=guard)
    documented["push"]["redis"]["url"] += f"?{REDIS_CLIENT_OPTIONS}"
    a = launch("around", documented, {"HOSTNAME": "eo-bot-around"})
    b = launch("elsewhere", documented_config(real_redis, guard=guard), {"HOSTNAME": "eo-bot-elsewhere"})
    assert a.webhook({"id": "warm", "text": "msg=warm"})[0] == 200  # the store is built
    real_redis.pause()
    try:
        status, body = a.webhook({"id": "around", "text": "msg=around"})
        assert status == 503 and body.get("retry") is True, body  # held: its SET waits in the paused Redis
        time.sleep(2.5)  # past the window
        flight = _turn_in_flight(a, llm, "around", 18)  # admitted best-effort, journalled
    finally:
        real_redis.resume()
    client = real_redis.client()
    claim = lambda: {k: client.get(k) for k in client.keys(f"{PREFIX}hookidem:*")}  # noqa: E731 - for the message
    _wait_until(lambda: a.health()["gateway_operator"]["idempotency"]["claims_held"] == 1, 10,
                "the running turn's claim written and held once Redis answers")
    for _ in range(2):  # at once, and past a whole lease (renewed meanwhile)
        status, body = b.webhook({"id": "around", "text": "msg=around delay=0"})
        assert status == 503 and body.get("in_progress") is True, (body, claim())
        time.sleep(11)
    flight["thread"].join(30)
    assert flight["answer"][0] == 200, flight
    assert b.webhook({"id": "around", "text": "msg=around delay=0"}) == (200, {"ok": True, "deduplicated": True})
    assert _answered(llm, "around") == 1
    own = a.health()["gateway_operator"]["idempotency"]
    assert own["leases_lost"] == 0 and own["claims_held"] == 0, own


def test_a_holder_cut_off_from_redis_past_its_lease_is_fenced_and_says_so_first(
        launch, real_redis: RedisServer, llm: StandInLLM) -> None:
    """Hole 2 of issue 56. A replica cut off from Redis (packets dropped) while its turn runs cannot
    renew its claim. Its /health says so at the first failed renewal (the operator reads that, and
    announces that exactly-once is not held, while the claim is still valid); before the claim can
    expire, the turn is stopped and the provider answered 503, so when the other replica admits the
    retry after the lease, the message is answered once."""
    from harness.tcp_cut import TcpCut
    guard = {"claim_lease_seconds": 10}
    proxy = TcpCut(real_redis.port)
    documented = documented_config(real_redis, guard=guard)
    documented["push"]["redis"]["url"] = f"redis://127.0.0.1:{proxy.port}/0"
    try:
        a = launch("cutoff", documented, {"HOSTNAME": "eo-bot-cutoff"})
        b = launch("reaching", documented_config(real_redis, guard=guard), {"HOSTNAME": "eo-bot-reaching"})
        flight = _turn_in_flight(a, llm, "cut-turn", 40)
        own = lambda: a.health()["gateway_operator"]["idempotency"]  # noqa: E731
        proxy.cut()
        cut = time.monotonic()
        _wait_until(lambda: own()["claims_unrenewed"] == 1, 8, "the failed renewal said in /health")
        said = time.monotonic() - cut
        seen = own()
        assert seen["claims_held"] == 1 and seen["claims_expire_in_s"] > 0, seen  # said while still valid
        flight["thread"].join(15)
        fenced = time.monotonic() - cut
        assert flight.get("answer", (None,))[0] == 503 and flight["answer"][1].get("retry") is True, flight
        assert own()["fenced"] == 1, own()

        _wait_until(_runs_when_retried(b, "cut-turn"), 20, "the retry run on the replica that reaches Redis")
        ran_again = time.monotonic() - cut
        print(f"cut off: said in /health after {said:.1f} s, fenced after {fenced:.1f} s, "
              f"run elsewhere after {ran_again:.1f} s (lease 10 s)")
        assert said < fenced < ran_again
        assert _answered(llm, "cut-turn") == 1, llm.turns
        assert "a webhook turn was stopped before its claim could expire" in a.output(), a.output()
    finally:
        proxy.heal()
        proxy.close()


def test_renewals_keep_a_claim_while_the_default_executor_is_busy(real_redis: RedisServer) -> None:
    """Hole 3 of issue 56: renewals ran through the event loop's default executor, which the agent
    framework fills with its blocking work; a busy pool let a claim expire under its turn. They run
    on a thread of their own now: with every default-executor worker blocked for longer than the
    lease, the claim is still renewed and never counted lost."""
    import asyncio as aio
    import threading
    from harness import pod_code
    pod_code.importable()
    import gwop_leases
    import gwop_upstream
    from praisonai_bot.bots._idempotency import RedisIdempotencyStore

    client = real_redis.client()
    gateway = type("G", (), {})()
    gateway._hook_idem = RedisIdempotencyStore(client, prefix=f"{PREFIX}hookidem:")
    redis = {"host": "127.0.0.1", "port": real_redis.port, "password": REDIS_PASSWORD}
    leases = gwop_leases.Leases(gateway, 10, "eo-bot-busy", redis)
    store = gwop_upstream.redis_store(gateway)
    token = leases.new_token()
    assert client.set(store.key("busy"), token, nx=True, px=leases.lease_ms)
    leases.hold("busy", token, leases.clock())
    release = threading.Event()

    async def starve() -> None:
        loop = aio.get_running_loop()
        workers = [loop.run_in_executor(None, release.wait, 30) for _ in range(64)]
        await aio.sleep(14)   # past the 10 s lease
        release.set()
        await aio.gather(*workers)
    leases.run_thread()
    try:
        aio.run(starve())
    finally:
        leases.stop()
    assert client.get(store.key("busy")) == token
    assert client.pttl(store.key("busy")) > 5_000
    assert leases.lost == 0 and leases.view()["claims_unrenewed"] == 0
