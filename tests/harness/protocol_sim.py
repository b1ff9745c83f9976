"""The claim, lease, window and journal protocol, driven without a network (issue 35, item 7).

The pod code that decides whether a webhook runs (gwop_journal.OutageJournal around gwop_leases.Leases
around praisonai-bot 0.1.16's own ``WebSocketGateway._hook_reserve/_record/_release`` and its real
``RedisIdempotencyStore``) runs here unchanged, for several replicas in one process, against a
REDIS STAND-IN (``SimRedis``: keys, PX expiry, SET NX and the launcher's and the store's Lua scripts,
on a simulated clock) that can be paused (commands queue and run when it resumes, as a SIGSTOPped
Redis runs what is in its sockets), cut off from one replica (packets dropped: nothing arrives),
flushed, restarted with or without persistence, or made to refuse writes (OOM). Replicas are
killed (no drain), stopped (drain, then the journal carried and claims released) and replaced.
The clock is an input: the journal's and the leases' ``time`` is the simulation's, and the
journal's once-a-second ``tick`` and the leases' renewal run when the simulated clock says so.

``run(ops)`` plays one interleaving and returns what happened; ``check`` asserts the checker's
invariants over it:

- **no re-run of a recorded webhook because of a blip**: a webhook whose record Redis held is
  admitted again only best-effort, and only after the replica had been unable to use Redis for
  the promised fail-closed window;
- **no silent duplicate**: a webhook answered twice is explained by an announced cause (a flush or
  a restart without persistence between the two, a lease lost while the first ran, a replica
  stopped or killed with the first still in its journal, or the second admitted best-effort);
- **claims free themselves**: no claim of a dead holder outlives the promised bound after its
  death (or after Redis answers again, when its claim was queued in a paused Redis);
- **nothing lost**: once every fault is healed and a lease has passed, every webhook not yet
  answered is admitted when the provider retries it.
"""
from __future__ import annotations

import asyncio
import fnmatch
import sys
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from .pod_code import POD_CODE

if str(POD_CODE) not in sys.path:
    sys.path.insert(0, str(POD_CODE))

import gwop_journal  # noqa: E402 - the pod code, as the pods run it
import gwop_leases  # noqa: E402
import gwop_upstream as upstream  # noqa: E402
from gwop_claims import release_unfinished_claims  # noqa: E402

PREFIX = "gwop:sim:bot:hookidem:"
PROMISED_WINDOW_S = 30.0    # spec.redis.failClosedSeconds' default: a blip shorter costs a retry
PROMISED_CLAIM_FREE_S = 90.0  # issue 35's bound: a dead holder's claim is freed within it
RENEW_EVERY = 1 / 3           # of the lease (gwop_leases.Leases.run)
JOURNAL_TICK_S = 1.0          # gwop_journal.OutageJournal.run


class Clock:
    """The simulated clock, as the pod code's ``time`` module."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now


async def _inline(function: Callable[..., Any], *args: Any) -> Any:
    """asyncio.to_thread, without a thread: the stand-in never blocks."""
    return function(*args)


def drive(coroutine: Any) -> Any:
    """Run a coroutine that never really suspends (every await inside is ``_inline``)."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    raise AssertionError("the pod code waited for something the simulation does not provide")


# -- the Redis stand-in --------------------------------------------------------------------------

class SimRedis:
    """REDIS STAND-IN: what the pod code and 0.1.16's store ask of Redis, on the simulated clock."""

    def __init__(self, clock: Clock, scripts: dict[str, str]) -> None:
        self.clock, self.scripts = clock, scripts
        self.data: dict[str, tuple[str, float | None]] = {}
        self.paused = False
        self.queued: list[Callable[[], Any]] = []
        self.oom = False

    def value(self, key: str) -> str | None:
        found = self.data.get(key)
        if found is not None and found[1] is not None and found[1] <= self.clock.now:
            del self.data[key]
            return None
        return found[0] if found else None

    def _set(self, key: str, value: str, px: int | None) -> None:
        self.data[key] = (value, None if px is None else self.clock.now + px / 1000)

    def call(self, cut_off: bool, command: Callable[[], Any], write: bool) -> Any:
        from redis.exceptions import OutOfMemoryError, TimeoutError
        if cut_off:
            raise TimeoutError("Timeout reading from socket (the stand-in: packets dropped)")
        if self.paused:
            self.queued.append(command)  # a stopped Redis runs it when it resumes
            raise TimeoutError("Timeout reading from socket (the stand-in: Redis paused)")
        if write and self.oom:
            raise OutOfMemoryError("command not allowed when used memory > 'maxmemory'.")
        return command()

    def resume(self) -> None:
        self.paused = False
        queued, self.queued = self.queued, []
        for command in queued:
            if not self.oom:
                command()

    # the commands
    def set(self, key: str, value: str, nx: bool = False, px: int | None = None) -> bool | None:
        if nx and self.value(key) is not None:
            return None
        self._set(key, value, px)
        return True

    def eval(self, script: str, key: str, *args: Any) -> int:
        kind, current = self.scripts[script], self.value(key)
        if kind == "record":      # the store's owner-checked record
            token, recorded, px = args
            if current is None or current in (token, recorded):
                self._set(key, recorded, int(px))
                return 1
            return 0
        if kind == "release":     # compare-and-delete
            if current == args[0]:
                del self.data[key]
                return 1
            return 0
        if kind == "renew":       # compare-and-pexpire
            if current == args[0]:
                self._set(key, current, int(args[1]))
                return 1
            return 0
        raise AssertionError(f"a script the stand-in does not know: {script[:60]}")


class SimClient:
    """One replica's redis-py client, as far as the pod code and the store use it."""

    def __init__(self, redis: SimRedis, replica: "Replica") -> None:
        self.redis, self.replica = redis, replica

    def _call(self, command: Callable[[], Any], write: bool = True) -> Any:
        return self.redis.call(self.replica.cut_off, command, write)

    def set(self, key: str, value: str, nx: bool = False, px: int | None = None) -> Any:
        return self._call(lambda: self.redis.set(key, value, nx=nx, px=px))

    def get(self, key: str) -> Any:
        return self._call(lambda: self.redis.value(key), write=False)

    def eval(self, script: str, numkeys: int, key: str, *args: Any) -> Any:
        return self._call(lambda: self.redis.eval(script, key, *args))

    def ping(self) -> bool:
        return self._call(lambda: True, write=False)

    def scan_iter(self, match: str = "*", count: int = 0) -> Iterable[str]:
        return iter(self._call(lambda: [k for k in list(self.redis.data) if fnmatch.fnmatchcase(k, match)
                                        and self.redis.value(k) is not None], write=False))


# -- replicas -------------------------------------------------------------------------------------

@dataclass
class Run:
    """One admission of a webhook, and what became of its turn."""

    msg: str
    replica: str
    admitted: float
    best_effort: bool
    unusable_for: float | None      # how long its replica had been unable to use Redis, at admission
    recorded_in_redis: bool         # Redis held the webhook's record when it was admitted
    answered: bool = False
    unrecorded: str = ""            # why its record may never reach Redis ("" : nothing known)


class Replica:
    def __init__(self, sim: "Sim", name: str) -> None:
        from praisonai_bot.bots._idempotency import RedisIdempotencyStore
        from praisonai_bot.gateway.server import WebSocketGateway
        self.sim, self.name, self.cut_off = sim, name, False
        self.gateway = object.__new__(WebSocketGateway)  # its claim calls, without a server
        self.gateway._hook_idem = RedisIdempotencyStore(SimClient(sim.redis, self), prefix=PREFIX,
                                                        ttl_seconds=86400)
        self.journal = gwop_journal.OutageJournal(self.gateway, sim.window)
        self.leases = gwop_leases.Leases(self.gateway, sim.lease, name)
        self.journal.wrap()   # the order of gwop_serve.guard_webhooks
        self.leases.wrap()
        self.calls = upstream.claim_calls(self.gateway)
        self.in_flight: dict[str, Run] = {}
        self.next_renewal = sim.clock.now + sim.lease * RENEW_EVERY

    @property
    def token(self) -> str:
        return self.leases.token

    def deliver(self, msg: str) -> str:
        """What the provider is answered: "ran" (admitted), "held" (503 retry) or "refused"."""
        if msg in self.in_flight:
            return "refused"
        self.journal.holding.set(False)
        before, recorded = self.journal.best_effort, self.sim.redis.value(PREFIX + msg) == "recorded"
        admitted = self.calls.reserve(msg)
        if self.journal.holding.get():
            return "held"
        if not admitted:
            return "refused"
        self.in_flight[msg] = Run(msg, self.name, self.sim.clock.now, self.journal.best_effort > before,
                                  self.sim.unusable_for(self), recorded)
        return "ran"

    def finish(self, msg: str) -> Run:
        run = self.in_flight.pop(msg)
        self.calls.record(msg)
        run.answered = True
        return run

    def tick(self) -> None:
        drive(self.journal.tick())

    def renew(self) -> None:
        held = set(self.leases.held)
        try:
            self.leases.renew()
        except Exception:  # noqa: BLE001 - as Leases.run: the next round
            pass
        for msg in held - set(self.leases.held):
            if msg in self.in_flight:
                self.in_flight[msg].unrecorded = "lease lost while the turn ran"

    def journalled(self) -> set[str]:
        return set(self.journal.admitted) | set(self.journal.done) | set(self.journal.contested)


# -- the simulation -------------------------------------------------------------------------------

@dataclass
class Sim:
    window: float = PROMISED_WINDOW_S
    lease: float = 60.0
    replicas: int = 3
    clock: Clock = field(default_factory=Clock)
    carry_at_stop: bool = True     # planted defects turn parts of the protocol off
    runs: list[Run] = field(default_factory=list)
    forgets: list[float] = field(default_factory=list)       # flushes, restarts without persistence
    usable_again: list[float] = field(default_factory=list)  # when Redis became usable again (resume, heal)
    dead: dict[str, float] = field(default_factory=dict)     # token -> when its holder died
    spells: dict[str, float] = field(default_factory=dict)   # replica -> since when it cannot use Redis
    delivered: set[str] = field(default_factory=set)
    recovered: dict[str, list[float]] = field(default_factory=dict)  # replica -> when its spells ended
    last_spell: dict[str, tuple[float, float]] = field(default_factory=dict)  # replica -> (began, ended)
    born: int = 0

    def __post_init__(self) -> None:
        from praisonai_bot.bots._idempotency import RedisIdempotencyStore
        from gwop_redis import RELEASE_LUA
        scripts = {RedisIdempotencyStore._RECORD_LUA: "record", RedisIdempotencyStore._RELEASE_LUA: "release",
                   RELEASE_LUA: "release", gwop_leases.RENEW_LUA: "renew"}
        self.redis = SimRedis(self.clock, scripts)
        self.pool = [self._new() for _ in range(self.replicas)]

    def _new(self) -> Replica:
        self.born += 1
        return Replica(self, f"r{self.born}")

    # what makes a replica unable to use Redis, and since when (for the window's promise)
    def _unusable(self, replica: Replica) -> bool:
        return replica.cut_off or self.redis.paused or self.redis.oom

    def _spells(self) -> None:
        for r in self.pool:
            if self._unusable(r):
                self.spells.setdefault(r.name, self.clock.now)
            elif (began := self.spells.pop(r.name, None)) is not None:
                self.usable_again.append(self.clock.now)
                self.recovered.setdefault(r.name, []).append(self.clock.now)
                self.last_spell[r.name] = (began, self.clock.now)

    def unusable_for(self, replica: Replica) -> float | None:
        """How long ``replica`` has been unable to use Redis; just after a spell (until its journal's
        next tick closes the breaker, JOURNAL_TICK_S) the spell's whole length: past the window the
        replica admits best-effort, as 0.1.16 does, until it has asked Redis again."""
        since = self.spells.get(replica.name)
        if since is not None:
            return self.clock.now - since
        began, ended = self.last_spell.get(replica.name, (None, None))
        if began is None or ended is None or self.clock.now > ended + JOURNAL_TICK_S:
            return None
        return ended - began

    # the operations
    def advance(self, seconds: float) -> None:
        """Time passes: each replica's journal ticks every second, its leases renew every third."""
        end = self.clock.now + seconds
        while self.clock.now < end:
            step = min(1.0, end - self.clock.now)
            self.clock.now += step
            for r in self.pool:
                r.tick()
                if self.clock.now >= r.next_renewal:
                    r.renew()
                    r.next_renewal = self.clock.now + self.lease * RENEW_EVERY
            check_claims(self)

    def deliver(self, replica: int, msg: str) -> str:
        self.delivered.add(msg)
        return self.pool[replica % len(self.pool)].deliver(msg)

    def finish(self, replica: int, which: int) -> None:
        r = self.pool[replica % len(self.pool)]
        if r.in_flight:
            self.runs.append(r.finish(sorted(r.in_flight)[which % len(r.in_flight)]))

    def kill(self, replica: int) -> None:
        """No drain (SIGKILL, a force delete, a lost node): its turns never answer, its journal is gone."""
        i = replica % len(self.pool)
        r = self.pool[i]
        self._unrecorded(r, "its replica was killed with it in the journal")
        self.dead[r.token] = self.clock.now
        self.pool[i] = self._new()
        self._spells()

    def stop(self, replica: int) -> None:
        """A graceful stop: in-flight turns finish (the drain), the journal is carried to Redis if
        it takes it (gwop_serve.carry, one attempt here), then this replica's claims are released."""
        i = replica % len(self.pool)
        r = self.pool[i]
        for msg in sorted(r.in_flight):
            self.runs.append(r.finish(msg))
        if self.carry_at_stop:
            try:
                r.journal.flush()
                r.journal.settle_contested()
            except Exception:  # noqa: BLE001 - as carry: Redis unusable, what is left is lost
                pass
        self._unrecorded(r, "its replica stopped with it in the journal")
        try:
            release_unfinished_claims(upstream.redis_store(r.gateway))
        except Exception:  # noqa: BLE001
            pass
        self.dead[r.token] = self.clock.now
        self.pool[i] = self._new()
        self._spells()

    def _unrecorded(self, r: Replica, why: str) -> None:
        left = r.journalled()
        for run in self.runs + list(r.in_flight.values()):
            if run.replica == r.name and run.msg in left and not run.unrecorded:
                run.unrecorded = why

    def pause(self) -> None:
        self.redis.paused = True
        self._spells()

    def resume(self) -> None:
        self.redis.resume()
        self._spells()

    def cut(self, replica: int, off: bool) -> None:
        self.pool[replica % len(self.pool)].cut_off = off
        self._spells()

    def refuse_writes(self, on: bool) -> None:
        self.redis.oom = on
        self._spells()

    def flush(self) -> None:
        self.redis.data.clear()
        self.forgets.append(self.clock.now)

    def restart(self, persistent: bool) -> None:
        """Redis restarts: what its sockets held is gone; without persistence, every key too."""
        self.redis.queued.clear()
        if not persistent:
            self.flush()
        self.redis.paused = False
        self._spells()

    def heal(self) -> None:
        """Every fault over (the final phase)."""
        for r in self.pool:
            r.cut_off = False
        self.redis.oom = False
        self.resume()


#: each operation an interleaving is made of: (sim, replica, message name, message index, seconds)
ACTIONS: dict[str, Callable[[Sim, int, str, int, float], Any]] = {
    "deliver": lambda sim, replica, name, _, __: sim.deliver(replica, name),
    "finish": lambda sim, replica, _, which, __: sim.finish(replica, which),
    "advance": lambda sim, _, __, ___, seconds: sim.advance(seconds),
    "pause": lambda sim, *_: sim.pause(),
    "resume": lambda sim, *_: sim.resume(),
    "cut": lambda sim, replica, *_: sim.cut(replica, True),
    "heal_one": lambda sim, replica, *_: sim.cut(replica, False),
    "oom": lambda sim, *_: sim.refuse_writes(True),
    "oom_over": lambda sim, *_: sim.refuse_writes(False),
    "flush": lambda sim, *_: sim.flush(),
    "restart": lambda sim, *_: sim.restart(persistent=True),
    "restart_empty": lambda sim, *_: sim.restart(persistent=False),
    "kill": lambda sim, replica, *_: sim.kill(replica),
    "stop": lambda sim, replica, *_: sim.stop(replica),
}
OPS = tuple(ACTIONS)


def play(sim: Sim, ops: Iterable[tuple[str, int, int, float]], messages: int = 6) -> Sim:
    """Apply each ``(op, replica, message, seconds)``; then heal everything, let one lease and the
    window pass, and retry every webhook never answered (the provider's retries)."""
    for op, replica, msg, seconds in ops:
        ACTIONS[op](sim, replica, f"m{msg % messages}", msg, seconds)
        check_claims(sim)
    sim.heal()
    sim.advance(max(sim.lease, sim.window) + 5)
    check_claims(sim)
    for r in sim.pool:  # turns still running end (a provider's retry meanwhile is told "in progress")
        for msg in sorted(r.in_flight):
            sim.runs.append(r.finish(msg))
    sim.advance(2)
    answered = {run.msg for run in sim.runs if run.answered}
    for i in range(messages):
        msg = f"m{i}"
        if msg in answered or msg not in sim.delivered:
            continue
        outcome = next((o for o in (sim.deliver(k, msg) for k in range(len(sim.pool))) if o == "ran"), None)
        assert outcome == "ran", f"{msg} was never answered and its retry is not admitted: lost"
        sim.runs.append(next(r for r in sim.pool if msg in r.in_flight).finish(msg))
    # and the provider delivers every answered webhook once more, to every replica: each must be
    # refused (check() judges any that runs)
    for msg in sorted({run.msg for run in sim.runs if run.answered}):
        for k in range(len(sim.pool)):
            if sim.deliver(k, msg) == "ran":
                sim.runs.append(sim.pool[k].finish(msg))
    return sim


def check_claims(sim: Sim) -> None:
    """No claim of a dead holder outlives PROMISED_CLAIM_FREE_S after its death, or after Redis
    was last usable again (a claim a paused Redis ran on resuming starts its lease then)."""
    for key in list(sim.redis.data):
        token = sim.redis.value(key)
        died = sim.dead.get(token or "")
        if died is None:
            continue
        since = max([died] + [t for t in sim.usable_again if t >= died])
        assert sim.clock.now - since <= PROMISED_CLAIM_FREE_S, \
            f"{key} is still claimed by a holder that died {sim.clock.now - died:.0f} s ago"


def check(sim: Sim) -> None:
    """The invariants over a played interleaving (see the module's docstring)."""
    for run in sim.runs:
        if run.recorded_in_redis:
            assert run.best_effort, f"{run.msg}: Redis held its record, and {run.replica} ran it again having asked Redis"
            assert run.unusable_for is not None and run.unusable_for >= PROMISED_WINDOW_S, \
                (f"{run.msg}: Redis held its record, and {run.replica} ran it again {run.unusable_for} s into a spell "
                 f"of Redis being unusable (the window promises {PROMISED_WINDOW_S:g} s of 503s first)")
    answered: dict[str, list[Run]] = {}
    for run in sorted((r for r in sim.runs if r.answered), key=lambda r: r.admitted):
        answered.setdefault(run.msg, []).append(run)
    for msg, runs in answered.items():
        for first, again in zip(runs, runs[1:]):
            # a first run admitted best-effort reaches Redis at its journal's first tick once its
            # replica can use Redis again: a second admission before that is the outage's own
            # (announced: RuntimeOutage), one after it is not
            carried = min((t for t in sim.recovered.get(first.replica, []) if t >= first.admitted), default=None)
            explained = (again.best_effort or first.unrecorded
                         or any(first.admitted <= at <= again.admitted for at in sim.forgets)
                         or (first.best_effort and (carried is None or again.admitted <= carried + JOURNAL_TICK_S)))
            assert explained, (f"{msg} answered twice, silently: by {first.replica} (admitted at +"
                               f"{first.admitted - 1_800_000_000:.0f} s) and {again.replica} (+"
                               f"{again.admitted - 1_800_000_000:.0f} s, asked Redis)")


def patched(clock: Clock) -> Callable[[], None]:
    """The pod code's clock and thread hop are the simulation's; returns the undo."""
    import logging
    import gwop_redis
    store_log = logging.getLogger("praisonai_bot")
    level = store_log.level
    store_log.setLevel(logging.ERROR)  # 0.1.16's store warns at every failed call
    saved = [(gwop_redis, "say", gwop_redis.say), (gwop_journal, "time", gwop_journal.time), (gwop_leases, "time", gwop_leases.time),
             (gwop_journal, "asyncio", gwop_journal.asyncio), (gwop_journal, "say", gwop_journal.say),
             (gwop_leases, "say", gwop_leases.say)]
    shim = types.SimpleNamespace(**{k: getattr(asyncio, k) for k in dir(asyncio) if not k.startswith("_")})
    shim.to_thread = _inline
    quiet = lambda *_: None  # noqa: E731
    for module, name, value in ((gwop_journal, "time", clock), (gwop_leases, "time", clock),
                                (gwop_journal, "asyncio", shim), (gwop_journal, "say", quiet),
                                (gwop_leases, "say", quiet), (gwop_redis, "say", quiet)):
        setattr(module, name, value)

    def undo() -> None:
        for m, n, v in saved:
            setattr(m, n, v)
        store_log.setLevel(level)
    return undo
