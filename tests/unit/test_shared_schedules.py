"""Scheduled jobs shared by the replicas (pod/gwop_schedules.py, through gwop_upstream's shared store),
against a real redis-server: praisonaiagents' own ``ScheduleRunner`` and its atomic claim, run by
several "replicas" (each its own store and Redis client) at once. The gateway itself is not needed
here; tests/unit/test_launcher_real_gateway.py runs the same store inside two real gateways."""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, List, Tuple

import pytest

pytest.importorskip("praisonaiagents", reason="the gateway's packages are not installed in this interpreter")

from harness.pod_code import importable  # noqa: E402
from harness.redis_server import RedisServer  # noqa: E402

importable()

import gwop_schedules  # noqa: E402  (the pod code's flat module names)
import gwop_upstream as upstream  # noqa: E402
from gwop_redis import redis_client  # noqa: E402

PREFIX = "gwop:ns:bot:"


def _client(redis: RedisServer, timeout: float = 1.0) -> Any:
    return redis_client({"host": redis.host, "port": redis.port, "password": redis.password}, timeout=timeout)


def shared_store(redis: RedisServer, tmp: Path, name: str) -> Any:
    return upstream.shared_schedule_store(gwop_schedules.RedisScheduleDocument(_client(redis), PREFIX, name),
                                          str(tmp / name))


def every_second_job(job_id: str = "report") -> Any:
    from praisonaiagents.scheduler.models import ScheduleJob
    from praisonaiagents.scheduler.parser import parse_schedule
    return ScheduleJob(id=job_id, name=job_id, schedule=parse_schedule("*/1s"), message="daily report")


def race(stores: List[Any], seconds: float) -> List[Tuple[str, float]]:
    """Every store ticks (claims what is due, then completes it) every 20 ms for ``seconds``, each in
    its own thread, started together; returns (replica, time) of every run claimed."""
    from praisonaiagents.scheduler import ScheduleRunner
    runs: List[Tuple[str, float]] = []
    start = threading.Barrier(len(stores))

    def tick(index: int, store: Any) -> None:
        runner, owner = ScheduleRunner(store), f"replica-{index}"
        start.wait()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for job in runner.claim_due_jobs(owner, 300.0):
                runs.append((owner, time.time()))
                runner.complete_run(job.id, owner)
            time.sleep(0.02)

    threads = [threading.Thread(target=tick, args=(i, s)) for i, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sorted(runs, key=lambda run: run[1])


def doubles(runs: List[Tuple[str, float]]) -> int:
    """Runs of a once-a-second job less than half a second after the one before: the same slot twice."""
    return sum(1 for (_, a), (_, b) in zip(runs, runs[1:]) if b - a < 0.5)


def test_a_job_due_every_second_runs_once_a_second_across_three_replicas(redis_server: RedisServer,
                                                                         tmp_path: Path) -> None:
    stores = [shared_store(redis_server, tmp_path, f"r{i}") for i in range(3)]
    stores[0].add(every_second_job())
    assert [j.id for j in stores[2].list()] == ["report"]  # added on one replica, seen by the others
    runs = race(stores, 4.2)
    assert 4 <= len(runs) <= 6, runs  # due at once, then every second: one run per slot
    assert doubles(runs) == 0, runs
    assert stores[1].get("report").run_count == len(runs)


def test_per_replica_stores_as_the_gateway_keeps_them_run_each_slot_on_every_replica(tmp_path: Path) -> None:
    """What the shared store fixes, measured the same way: 0.1.16's file store in each replica's own
    home (the gateway's default) runs every slot on every replica."""
    stores = [upstream.file_schedule_store(str(tmp_path / f"r{i}" / "config.yaml")) for i in range(3)]
    for store in stores:  # each replica loads gateway.yaml's schedules: into its own store
        store.add(every_second_job())
    runs = race(stores, 3.2)
    assert len(runs) >= 9 and doubles(runs) >= 6, runs


def test_a_holder_that_lost_the_lock_saves_nothing(redis_server: RedisServer) -> None:
    """A replica stalled past the lock (LOCK_MS) while another took it: its write is refused, so its
    claim is dropped (the store's own rule for a claim it could not save), never saved over the other's."""
    mine = gwop_schedules.RedisScheduleDocument(_client(redis_server), PREFIX, "stalled")
    with mine.lock():
        assert mine.write({"schedules": {}, "job_state": {"a": {"n": 1}}})
        redis_server.client().set(f"{PREFIX}gwop-schedules:lock", "other-replica:token")  # expired, taken
        assert not mine.write({"schedules": {}, "job_state": {"a": {"n": 2}}})
    assert mine.read()["job_state"] == {"a": {"n": 1}}
    assert redis_server.client().get(f"{PREFIX}gwop-schedules:lock") == "other-replica:token"  # not released


def test_a_stale_copy_never_moves_a_jobs_last_run_back(redis_server: RedisServer, tmp_path: Path) -> None:
    """0.1.16's declarative loader reads a job, then updates it: a read from before another replica's
    claim would make the job due again, and it would run twice."""
    from praisonaiagents.scheduler import ScheduleRunner
    a, b = shared_store(redis_server, tmp_path, "a"), shared_store(redis_server, tmp_path, "b")
    a.add(every_second_job())
    stale = b.get("report")
    assert [j.id for j in ScheduleRunner(a).claim_due_jobs("a", 300.0)] == ["report"]
    b.update(stale)  # last_run_at None and run_count 0 in the copy
    assert a.get("report").last_run_at is not None and a.get("report").run_count == 1
    reloaded = every_second_job()  # the loader's job from gateway.yaml: it carries the last run over, not the count
    reloaded.last_run_at = a.get("report").last_run_at
    b.update(reloaded)
    assert a.get("report").run_count == 1
    assert ScheduleRunner(b).claim_due_jobs("b", 300.0) == []


def test_while_redis_is_down_nothing_is_claimed_and_it_is_said_once(redis_server: RedisServer, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from praisonaiagents.scheduler import ScheduleRunner
    store = upstream.shared_schedule_store(
        gwop_schedules.RedisScheduleDocument(_client(redis_server, timeout=0.3), PREFIX, "r"), str(tmp_path / "r"))
    store.add(every_second_job())
    redis_server.pause()
    try:
        runner = ScheduleRunner(store)
        assert runner.claim_due_jobs("r", 300.0) == [] and runner.claim_due_jobs("r", 300.0) == []
    finally:
        redis_server.resume()
    said = [line for line in capsys.readouterr().err.splitlines() if "shared store cannot be used" in line]
    assert len(said) == 1, said
    assert [j.id for j in ScheduleRunner(store).claim_due_jobs("r", 300.0)] == ["report"]  # due, once it answers


def test_a_replicas_own_chat_jobs_are_carried_once_and_the_declared_ones_left(redis_server: RedisServer,
                                                                               tmp_path: Path) -> None:
    from praisonai_bot.scheduler.config_loader import schedule_job_from_config
    data = tmp_path / "home" / ".praisonai"
    local = upstream.file_schedule_store(str(data / "config.yaml"))
    local.add(every_second_job("chat-made"))
    local.add(schedule_job_from_config("morning", {"prompt": "brief", "every": "24h"}))
    shared = shared_store(redis_server, tmp_path, "r")
    assert gwop_schedules.carry_local_jobs(shared, data) == 1
    assert [j.id for j in shared.list()] == ["chat-made"]
    assert [upstream.declarative_job(j) for j in upstream.file_schedule_store(str(data / "config.yaml")).list()] == [True]
    shared.remove("chat-made")  # removed by a user since: a later start must not bring it back
    assert gwop_schedules.carry_local_jobs(shared, data) == 0 and shared.list() == []
