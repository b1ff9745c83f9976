"""The claim, lease, window and journal protocol, driven without a network, on a simulated clock
that the invariants read (issue 35, item 7; issue 56, item 6).

The pod code that decides whether a webhook runs (gwop_claims.answer_inflight_duplicates around
gwop_leases.Leases around gwop_journal.OutageJournal around praisonai-bot 0.1.16's own
``WebSocketGateway._hook_reserve/_record/_release`` and its real ``RedisIdempotencyStore``) runs
here unchanged, for several replicas in one process, against a REDIS STAND-IN (``SimRedis``: keys,
PX expiry, SET NX and the launcher's and the store's Lua scripts, on a simulated clock) that can be
paused (commands queue and run when it resumes, as a SIGSTOPped Redis runs what is in its sockets),
cut off from one replica (packets dropped: nothing arrives), flushed, restarted with or without
persistence, or made to refuse writes (OOM). Each delivery goes through the ``/hooks/`` route's
endpoint as the launcher wraps it (the in-flight and held answers, 503; the drain's cancel
releasing claims), around a copy of 0.1.16's handler (reserve, the agent's turn, record or release),
each in its own context as asyncio runs each request in a task of its own; the agent's turn is
an awaitable the simulation ends (or fails, or the drain cancels).

Replicas are killed (no drain), stopped (drain, then the journal carried and claims released;
``stop_cut``: the drain ends with turns still running, which it cancels), replaced, paused as a
SIGSTOP pauses a process (nothing of it runs: no renewal, no tick, no answer to /health; requests
wait in its socket and run when it resumes, after the provider gave up on them; on resuming the
overdue timers fire at once), given a busy thread pool (the work that goes through the default
executor, the journal's ticks and today's renewals, waits while the agent's calls hold it; the
turns still progress), given late renewals (a renewal round late by N seconds, whatever runs it),
and hidden from the operator (its /health cannot be reached). The clock is an input: the journal's,
leases', probe's and /health's ``time`` is the simulation's, and the journal's once-a-second tick,
the leases' renewal (every third of the lease; a round that fails opens the breaker, wired by the
pod's own gwop_claims.guard_claim_calls), the reach probe (2 s) and the operator's poll (2 s)
run when the simulated clock says so.

THE OPERATOR is simulated too, with its real pure code: every POLL_S it reads each replica's
/health (0.1.16's ``degraded_owners`` for its store, and the launcher's own section,
``gwop_health.section``, as JSON through ``core.health.parse_answer``; a paused or hidden replica
answers nothing: Unreachable), carries the unrecorded-admissions window (``core.unrecorded.assess``
and ``settle`` over the replicas that went away, as loop/controller does), and computes
``ExactlyOnceAdmission`` with ``core.conditions.compute`` (its Redis probe passes while Redis is
not paused). What it said at its last poll is what a user could have seen. With ``watch`` (the
default, as the operator runs: it holds a long-poll ``/health`` per replica, answered as soon as
what the answer means changes, gwop_watch) it also reads every replica after each event; the real
watch's tick (0.2 s) and the network are the residual: a replica killed within them after it
answered a turn it could not record leaves that turn unannounced (said in docs/redis.md).

``run(ops)`` plays one interleaving and returns what happened; ``check`` asserts the invariants:

- **no re-run of a recorded webhook because of a blip**: a webhook whose record Redis held is
  admitted again only best-effort, and only after the replica had been unable to use Redis for
  the promised fail-closed window;
- **a replica says its own best-effort admissions**: each webhook a replica admits without asking
  Redis is admitted while its own /health lists ``durability:idempotency`` (what
  IdempotencyDegraded counts), whatever opened its breaker (a webhook's call, a renewal round);
- **no silent duplicate, in time**: a webhook answered twice is excused only when, at its second
  admission, the operator's ExactlyOnceAdmission as of its last poll was not True (an announcement
  visible before the second run), or Redis forgot its records (a flush, a restart without
  persistence) between the two admissions. A loss noticed later, a journal known lost later, do
  not excuse it: the announcement comes after the duplicate;
- **claims free themselves**: no claim of a dead holder outlives the promised bound after its
  death (or after Redis answers again, when its claim was queued in a paused Redis);
- **nothing lost**: once every fault is healed and a lease has passed, every webhook not yet
  answered is admitted when the provider retries it; and no webhook whose provider was answered
  2xx (``deduplicated``: it stops retrying) is left without a completed turn;
- **the journal is carried**: every turn ended and Redis usable for a lease after that, no
  replica's journal holds an admission Redis has no record of (the AdmissionsNotRecorded window
  that announces them ends, rather than announcing a risk forever).

Each violation names the key's history in Redis (who wrote, renewed, released it, when it expired)
and what the operator said, so that a finding says which hole it is.

Coalesced hooks (issue 56's hole 4) are there as 0.1.16 runs them, ``Sim(coalesced=True)``: the
delivery recorded and answered 202, its group run later by the coalescer, cancelled by a stop; the
operator refuses them with more than one replica (validation.MSG_COALESCE_ONE_REPLICA), so the
exploration of today's protocol leaves them out.

What is not here: shared sessions (the session lock and history, gwop_sessions), Redis failover to
a lagging replica, the operator's own restarts and shards, the readiness gate taking a replica out
of the traffic, and what a cut or cancelled turn already did.
"""
from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import fnmatch
import json
import sys
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from .pod_code import POD_CODE

if str(POD_CODE) not in sys.path:
    sys.path.insert(0, str(POD_CODE))

import gwop_health  # noqa: E402 - the pod code, as the pods run it
import gwop_journal  # noqa: E402
import gwop_leases  # noqa: E402
import gwop_reach  # noqa: E402
import gwop_upstream as upstream  # noqa: E402
from gwop_claims import guard_claim_calls, release_unfinished_claims  # noqa: E402

from gateway_operator.api import IDEMPOTENCY_OWNER  # noqa: E402 - the operator's pure code
from gateway_operator.api import reasons as R  # noqa: E402
from gateway_operator.core import claim_risk, conditions, unrecorded  # noqa: E402
from gateway_operator.core.health import ReplicaHealth, parse_answer  # noqa: E402
from gateway_operator.core.probe_result import ProbeResult  # noqa: E402

SIM_PREFIX = "gwop:sim:bot:"
PREFIX = SIM_PREFIX + "hookidem:"
PROMISED_WINDOW_S = 30.0    # spec.redis.failClosedSeconds' default: a blip shorter costs a retry
PROMISED_CLAIM_FREE_S = 90.0  # issue 35's bound: a dead holder's claim is freed within it
RENEW_EVERY = 1 / 3           # of the lease (gwop_leases.Leases.run)
JOURNAL_TICK_S = 1.0          # gwop_journal.OutageJournal.run
POLL_S = 2.0                  # the operator's /health poll (spec.health.intervalSeconds' default)
DRAIN_S = 30.0                # spec.drainSeconds, as the operator's settle() allows a stop
VERSIONS = {"praisonai-bot": "0.1.16", "praisonaiagents": "1.7.17"}
T0 = 1_800_000_000.0

#: the launcher renews on a thread of its own (gwop_leases.Leases.run_thread), not held up by a busy
#: default executor; ``Sim(renewals_on_the_pool=True)`` plants back the launcher before issue 56,
#: whose renewals went through asyncio.to_thread and waited behind the agent's calls (hole 3)
RENEWALS_ON_THE_POOL = False


class Clock:
    """The simulated clock, as the pod code's ``time`` module."""

    def __init__(self) -> None:
        self.now = T0

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now


def at(t: float) -> str:
    return f"+{t - T0:.0f} s"


#: above 0 while a call the pod makes on a thread of its own runs (the journal's flush, its probe of
#: Redis): what a replica's event loop does meanwhile (``Replica.meanwhile``) can run inside it
OFF_LOOP = [0]


async def _inline(function: Callable[..., Any], *args: Any) -> Any:
    """asyncio.to_thread, without a thread: the stand-in never blocks."""
    OFF_LOOP[0] += 1
    try:
        return function(*args)
    finally:
        OFF_LOOP[0] -= 1


def drive(coroutine: Any) -> Any:
    """Run a coroutine that never really suspends (every await inside is ``_inline``)."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    raise AssertionError("the pod code waited for something the simulation does not provide")


# -- the Redis stand-in --------------------------------------------------------------------------

def holder(value: str | None) -> str:
    """Whose a key's value is: the replica a claim's token names, "recorded", or "nothing"."""
    return "nothing" if value is None else value if value == "recorded" else value.split(":")[0]


class SimRedis:
    """REDIS STAND-IN: what the pod code and 0.1.16's store ask of Redis, on the simulated clock.
    It keeps each key's history (``said``) for the violations' messages."""

    def __init__(self, clock: Clock, scripts: dict[str, str]) -> None:
        self.clock, self.scripts = clock, scripts
        self.data: dict[str, tuple[str, float | None]] = {}
        self.paused = False
        self.queued: list[Callable[[], Any]] = []
        self.oom = False
        self.history: dict[str, list[tuple[float, str]]] = {}

    def note(self, key: str, what: str, when: float | None = None) -> None:
        if key.startswith(PREFIX):
            self.history.setdefault(key, []).append((self.clock.now if when is None else when, what))

    def said(self, key: str, until: float | None = None) -> str:
        """What happened to ``key`` (up to ``until``), the last eight events."""
        events = [f"{at(t)} {what}" for t, what in self.history.get(key, []) if until is None or t <= until]
        return "; ".join(events[-8:]) or "nothing"

    def value(self, key: str) -> str | None:
        found = self.data.get(key)
        if found is not None and found[1] is not None and found[1] <= self.clock.now:
            del self.data[key]
            self.note(key, f"{holder(found[0])}'s {'record' if found[0] == 'recorded' else 'claim'} expired", found[1])
            return None
        return found[0] if found else None

    def _set(self, key: str, value: str, px: int | None, what: str) -> None:
        self.data[key] = (value, None if px is None else self.clock.now + px / 1000)
        self.note(key, f"{what} ({holder(value)}, {'no TTL' if px is None else f'{px / 1000:.0f} s'})")

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
        self._set(key, value, px, "SET NX" if nx else "SET")
        return True

    def eval(self, script: str, key: str, *args: Any) -> int:
        kind, current = self.scripts[script], self.value(key)
        if kind == "record":      # the store's owner-checked record
            token, recorded, px = args
            if current is None or current in (token, recorded):
                self._set(key, recorded, int(px), f"recorded by {holder(token)}")
                return 1
            self.note(key, f"{holder(token)}'s record found {holder(current)}'s claim: nothing written")
            return 0
        if kind == "release":     # compare-and-delete
            if current == args[0]:
                del self.data[key]
                self.note(key, f"{holder(current)}'s claim deleted by an owner-checked release")
                return 1
            return 0
        if kind == "renew":       # compare-and-pexpire
            if current == args[0]:
                self.data[key] = (current, self.clock.now + int(args[1]) / 1000)
                return 1
            self.note(key, f"{holder(args[0])}'s renewal found {holder(current)}: lost")
            return 0
        if kind == "take":        # the journal's claim of a running turn (gwop_leases.TAKE_LUA)
            token, one, other, px = args
            if current is None or current in (one, other):
                self._set(key, token, int(px), f"claimed by {holder(token)} for its running turn")
                return 1
            return 0
        raise AssertionError(f"a script the stand-in does not know: {script[:60]}")


class SimClient:
    """One replica's redis-py client, as far as the pod code and the store use it."""

    def __init__(self, redis: SimRedis, replica: "Replica") -> None:
        self.redis, self.replica = redis, replica

    def _call(self, command: Callable[[], Any], write: bool = True, key: str | None = None) -> Any:
        answer = self.redis.call(self.replica.cut_off, command, write)
        meanwhile = self.replica.meanwhile
        if OFF_LOOP[0] and meanwhile is not None and meanwhile[0] == key:
            # the replica's event loop runs between this call's answer, on a thread of its own, and
            # what that thread does with it (the two run at once in the pod)
            self.replica.meanwhile, depth, OFF_LOOP[0] = None, OFF_LOOP[0], 0
            try:
                meanwhile[1]()
            finally:
                OFF_LOOP[0] = depth
        return answer

    def set(self, key: str, value: str, nx: bool = False, px: int | None = None) -> Any:
        return self._call(lambda: self.redis.set(key, value, nx=nx, px=px), key=key)

    def get(self, key: str) -> Any:
        return self._call(lambda: self.redis.value(key), write=False, key=key)

    def eval(self, script: str, numkeys: int, key: str, *args: Any) -> Any:
        return self._call(lambda: self.redis.eval(script, key, *args), key=key)

    def ping(self) -> bool:
        return self._call(lambda: True, write=False)

    def scan_iter(self, match: str = "*", count: int = 0) -> Iterable[str]:
        return iter(self._call(lambda: [k for k in list(self.redis.data) if fnmatch.fnmatchcase(k, match)
                                        and self.redis.value(k) is not None], write=False))


# -- the webhook path: 0.1.16's handler inside the launcher's endpoint ----------------------------

class Turn:
    """The agent's turn, as the handler awaits it: suspended until the simulation ends it."""

    def __init__(self) -> None:
        self.outcome: str | None = None   # "ok", "error"

    def __await__(self) -> Any:
        while self.outcome is None:
            yield self
        if self.outcome == "error":
            raise RuntimeError("the agent's turn failed")
        return {"ok": True}


def hook_handler(gateway: Any, coalesced: bool = False) -> Callable[[Any], Any]:
    """What 0.1.16's ``/hooks/{path}`` handler does once the payload is parsed (server.py, ``start``):
    reserve the key (200 deduplicated when refused), run the turn, record it when it went well,
    release it when it failed. ``coalesced`` (a hook with ``coalesce``): the key is recorded and the
    delivery answered 202 at once, its group's run left to the coalescer (``Replica.groups``), which
    a stop cancels (0.1.16's ``HookCoalescer.aclose``)."""
    from starlette.responses import JSONResponse

    async def handler(request: Any) -> Any:
        idem = request.msg
        if not gateway._hook_reserve(idem):
            return JSONResponse({"ok": True, "deduplicated": True})
        if coalesced:
            gateway._hook_record(idem)
            return JSONResponse({"ok": True, "coalesced": True, "pending": 1}, status_code=202)
        try:
            result = await request.turn
        except Exception as e:  # noqa: BLE001 - as 0.1.16
            gateway._hook_release(idem)
            return JSONResponse({"ok": False, "error": str(e)}, status_code=500)
        if result.get("ok", False):
            gateway._hook_record(idem)
        else:
            gateway._hook_release(idem)
        return JSONResponse(result, status_code=200 if result.get("ok") else 500)

    return handler


def answer_of(response: Any) -> str:
    """What the provider was told: "answered" (200, the turn ran), "deduplicated" (200), "accepted"
    (202, a coalesced group will run it), "held" (503, the fail-closed window), "in_progress" (503),
    "retry" (503, the drain cut the turn), "error" (500)."""
    body = json.loads(response.body)
    if response.status_code == 202:
        return "accepted"
    if response.status_code == 200:
        return "deduplicated" if body.get("deduplicated") else "answered"
    if response.status_code == 503:
        return "in_progress" if body.get("in_progress") else "held" if "idempotency store" in body.get("error", "") \
            else "retry"
    return "error"


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
    said: tuple[str, str, str]      # the operator's ExactlyOnceAdmission at its last poll: status, reason, message
    owner_said: bool = False        # its replica's own /health listed durability:idempotency as it was admitted
    request: Any = None
    context: Any = None
    coroutine: Any = None
    answered: bool = False          # the turn completed and the provider was answered 200
    ended: str = ""                 # what the provider was told at its end


class Replica:
    def __init__(self, sim: "Sim", name: str) -> None:
        from praisonai_bot.bots._idempotency import RedisIdempotencyStore
        from praisonai_bot.gateway.server import WebSocketGateway
        from starlette.routing import Route
        self.sim, self.name, self.cut_off = sim, name, False
        self.gateway = object.__new__(WebSocketGateway)  # its claim calls, without a server
        self.gateway._hook_idem = RedisIdempotencyStore(SimClient(sim.redis, self), prefix=PREFIX,
                                                        ttl_seconds=86400)
        self.route = Route(upstream.HOOK_ROUTE, hook_handler(self.gateway, sim.coalesced))
        self.gateway._server = types.SimpleNamespace(config=types.SimpleNamespace(
            app=types.SimpleNamespace(routes=[self.route])))
        self.gateway.get_hook = lambda path: None  # gwop_limits.refusal: no id template to check here
        self.leases = gwop_leases.Leases(self.gateway, sim.lease, name, clock=sim.clock.monotonic, wall=sim.clock.time)
        self.journal = gwop_journal.OutageJournal(self.gateway, sim.window, adopt=self.leases.adopt,
                                                   disown=self.leases.disown)
        # as gwop_serve guards them; a failed renewal round opens the breaker at once (the pod hands it
        # to the event loop, which runs it before anything else of this replica here)
        assert guard_claim_calls(self.gateway, self.journal, self.leases, 1 << 20, lambda call: call()), \
            "the /hooks/ route was not found"
        self.reach = gwop_reach.Reach({"prefix": SIM_PREFIX}, clock=sim.clock.monotonic)
        self.reach._client = SimClient(sim.redis, self)
        self.in_flight: list[Run] = []
        self.groups: list[Run] = []    # coalesced deliveries whose group has not run (answered 202)
        now = sim.clock.now
        self.next_renewal, self.next_tick, self.next_probe = now + sim.lease * RENEW_EVERY, now + 1.0, now + 2.0
        self.paused = False            # SIGSTOPped
        self.resumed = 0.0             # when it was last resumed (SIGCONT)
        self.paused_at = 0.0           # when it was last SIGSTOPped
        self.socket: list[str] = []    # deliveries waiting in its socket while it is paused
        self.pool_busy_until = 0.0     # its default executor is held by the agent's calls until then
        self.hidden = False            # the operator cannot reach its /health
        # (a key, event-loop work) run once a thread of its own (the journal's) has a Redis call on
        # that key answered (SimClient._call)
        self.meanwhile: tuple[str, Callable[[], Any]] | None = None

    @property
    def token(self) -> str:
        """What every claim of this replica's process starts with."""
        return self.leases.process

    def _step(self, run: Run, how: Callable[[Any], Any]) -> Any:
        """Run the request's coroutine, in its own context, until the turn suspends it (None) or it
        answers (the response)."""
        try:
            suspended = run.context.run(how, run.coroutine)
        except StopIteration as done:
            return done.value
        assert isinstance(suspended, Turn), f"the endpoint waited for {suspended!r}, not the turn"
        return None

    def deliver(self, msg: str) -> str:
        """What the provider is told: "ran" (admitted, the turn runs), "timeout" (paused: the request
        waits in the socket), or answer_of's."""
        if self.paused:
            self.socket.append(msg)
            return "timeout"
        recorded = self.sim.redis.value(PREFIX + msg) == "recorded"
        run = Run(msg, self.name, self.sim.clock.now, False, self.sim.unusable_for(self), recorded, self.sim.said)
        before = self.journal.best_effort
        run.request, run.context = (types.SimpleNamespace(msg=msg, turn=Turn(), _body=b"{}", headers={},
                                                          path_params={"path": "events"}),
                                    contextvars.copy_context())
        run.coroutine = run.context.run(self.route.endpoint, run.request)
        response = self._step(run, lambda c: c.send(None))
        if response is not None:
            told = answer_of(response)
            if told == "accepted":  # recorded; its coalesced group runs later, or a stop cancels it
                self.groups.append(run)
            return told
        run.best_effort = self.journal.best_effort > before
        run.owner_said = self.owner_said()
        self.in_flight.append(run)
        return "ran"

    def end(self, run: Run, outcome: str) -> Run:
        """The turn ends ("ok", "error") or the drain's end cancels it ("cancel")."""
        self.in_flight.remove(run)
        if outcome == "cancel":
            response = self._step(run, lambda c: c.throw(asyncio.CancelledError()))
        else:
            run.request.turn.outcome = outcome
            response = self._step(run, lambda c: c.send(None))
        assert response is not None, "the endpoint went on waiting after its turn ended"
        run.ended = answer_of(response)
        run.answered = run.ended == "answered"
        return run

    def run_group(self, run: Run) -> Run:
        """The coalescer runs a group: its turn completes (its provider was answered 202 long ago)."""
        self.groups.remove(run)
        run.answered, run.ended = True, "answered"
        return run

    # what runs on its own clock
    def pool_free(self) -> bool:
        return self.sim.clock.now >= self.pool_busy_until

    def timers(self) -> None:
        """What is due: the journal's tick and the reach probe, the leases' renewal (each on a thread
        of its own; through the busy default executor where a planted defect says so), the fence."""
        if self.paused:
            return
        now = self.sim.clock.now
        on_time = self.pool_free() or not self.sim.journal_on_the_pool
        if now >= self.next_tick and on_time:
            drive(self.journal.tick())
            self.next_tick = now + JOURNAL_TICK_S
        if now >= self.next_probe and on_time:
            self.reach.probe()
            self.next_probe = now + gwop_reach.Reach.PERIOD_S
        if now >= self.next_renewal and (self.pool_free() or not self.sim.renewals_on_the_pool):
            self.next_renewal = now + self.sim.lease * RENEW_EVERY
            try:
                self.leases.renew()
            except Exception:  # noqa: BLE001 - as Leases.run_thread: again in RETRY_S
                self.next_renewal = now + gwop_leases.RETRY_S
        if self.sim.fenced:  # the fence, on the event loop: a turn whose claim is due is cancelled
            for key in self.leases.due():
                run = next((run for run in reversed(self.in_flight) if run.msg == key), None)
                if run is not None:
                    self.sim.runs.append(self.end(run, "cancel"))

    def owner_said(self) -> bool:
        """Its /health lists durability:idempotency: 0.1.16's registry entry, one per process, set and
        cleared with its store's degraded fact."""
        store = upstream.redis_store(self.gateway)
        return store is not None and store.degraded()

    def health(self) -> ReplicaHealth:
        """What the operator's poll reads of it: its /health answer, through parse_answer."""
        if self.paused or self.hidden:
            return parse_answer(self.name, 0, b"")
        body: dict[str, Any] = {"status": "ok"}
        if self.owner_said():
            refusal = self.journal.view().get("refusal")
            body["degraded_owners"] = [{"owner_id": IDEMPOTENCY_OWNER, "reason": gwop_journal.RUNTIME_TEXT +
                                        (f": {refusal}" if refusal else "")}]
        body[gwop_health.SECTION] = gwop_health.section(self.gateway, self.journal, self.leases, VERSIONS, self.reach)
        return parse_answer(self.name, 200, json.dumps(body).encode())

    def journalled(self) -> set[str]:
        return set(self.journal.admitted) | set(self.journal.done) | set(self.journal.contested)


# -- the simulation -------------------------------------------------------------------------------

NOT_POLLED = ("Unknown", "NotPolledYet", "the operator has not polled yet")


@dataclass
class Sim:
    window: float = PROMISED_WINDOW_S
    lease: float = 60.0
    replicas: int = 3
    clock: Clock = field(default_factory=Clock)
    carry_at_stop: bool = True     # planted defects turn parts of the protocol off
    # every hook coalesces (0.1.16: recorded and answered 202 before its group runs; a stop cancels
    # the group): what the operator refuses with more than one replica under Refuse (issue 56, hole 4)
    coalesced: bool = False
    renewals_on_the_pool: bool = RENEWALS_ON_THE_POOL
    fenced: bool = True            # the fence runs (gwop_leases.Leases.due)
    # the launcher before issue 56 ran the journal's tick and the reach probe through the default
    # executor the agent's calls hold (today: a thread of their own, gwop_journal.off_loop)
    journal_on_the_pool: bool = False
    # the operator before issue 56: ExactlyOnceAdmission read neither a replica's own view of Redis
    # nor its claims (only the readiness gate read the first)
    operator_reads_claims: bool = True
    watch: bool = True             # the operator hears each replica's change before the next event
    runs: list[Run] = field(default_factory=list)
    forgets: list[float] = field(default_factory=list)       # flushes, restarts without persistence
    usable_again: list[float] = field(default_factory=list)  # when Redis became usable again (resume, heal)
    dead: dict[str, float] = field(default_factory=dict)     # token -> when its holder died
    spells: dict[str, float] = field(default_factory=dict)   # replica -> since when it cannot use Redis
    delivered: set[str] = field(default_factory=set)
    # told 2xx without a run of its own (deduplicated, or accepted for a coalesced group): the provider stops
    deduplicated: set[str] = field(default_factory=set)
    last_spell: dict[str, tuple[float, float]] = field(default_factory=dict)  # replica -> (began, ended)
    born: int = 0
    # the operator
    said: tuple[str, str, str] = NOT_POLLED                  # ExactlyOnceAdmission at its last poll
    next_poll: float = T0
    window_open: unrecorded.Unrecorded = field(default_factory=unrecorded.Unrecorded)
    last_answers: dict[str, ReplicaHealth] = field(default_factory=dict)
    leaving: dict[str, unrecorded.Leaving] = field(default_factory=dict)
    carried: set[str] = field(default_factory=set)           # stops that said they carried their journal
    gone: list[ReplicaHealth] = field(default_factory=list)
    holders: dict[str, claim_risk.Holder] = field(default_factory=dict)  # claim_risk.remember's memory across polls, as loop/controller keeps it

    def __post_init__(self) -> None:
        from praisonai_bot.bots._idempotency import RedisIdempotencyStore
        from gwop_redis import RELEASE_LUA
        scripts = {RedisIdempotencyStore._RECORD_LUA: "record", RedisIdempotencyStore._RELEASE_LUA: "release",
                   RELEASE_LUA: "release", gwop_leases.RENEW_LUA: "renew", gwop_leases.TAKE_LUA: "take"}
        self.redis = SimRedis(self.clock, scripts)
        self.pool = [self._new() for _ in range(self.replicas)]
        self.poll()

    def _new(self) -> Replica:
        self.born += 1
        return Replica(self, f"r{self.born}")

    def replica(self, i: int) -> Replica:
        return self.pool[i % len(self.pool)]

    # what makes a replica unable to use Redis, and since when (for the window's promise)
    def _unusable(self, replica: Replica) -> bool:
        return replica.cut_off or self.redis.paused or self.redis.oom

    def _blind_until(self, r: Replica, ended: float) -> float:
        """Until when ``r`` could not have seen a spell that ended at ``ended`` end: its journal asks
        Redis once a tick, after its pool frees and after it resumes; a replica SIGSTOPped since
        before that tick sees nothing until it is resumed (and ticks)."""
        if r.paused and r.paused_at <= ended + JOURNAL_TICK_S:
            return self.clock.now + JOURNAL_TICK_S
        return max(ended, r.pool_busy_until, r.resumed) + JOURNAL_TICK_S

    def _spells(self) -> None:
        """Each replica's spells of Redis being unusable. One that begins before the replica's journal
        could have seen the last one end (it asks once a tick; not at all while it is stopped) is
        that one going on, to the replica: the window it promises is of spells it could see."""
        for r in self.pool:
            if self._unusable(r):
                began, ended = self.last_spell.get(r.name, (None, None))
                again = began is not None and ended is not None and self.clock.now <= self._blind_until(r, ended)
                self.spells.setdefault(r.name, began if again else self.clock.now)
            elif (began := self.spells.pop(r.name, None)) is not None:
                self.usable_again.append(self.clock.now)
                self.last_spell[r.name] = (began, self.clock.now)

    def unusable_for(self, replica: Replica) -> float | None:
        """How long ``replica`` has been unable to use Redis; just after a spell (until its journal's
        next tick can close the breaker: later when its pool is busy or it was paused) the spell's
        whole length: past the window the replica admits best-effort, as 0.1.16 does, until it has
        asked Redis again (back-to-back spells are one: ``_spells``)."""
        since = self.spells.get(replica.name)
        began, ended = self.last_spell.get(replica.name, (None, None))
        if since is not None:
            return self.clock.now - since
        if began is None or ended is None or self.clock.now > self._blind_until(replica, ended):
            return None
        return ended - began

    # the operator
    def poll(self) -> None:
        """The operator's poll: every replica's /health, the unrecorded window, ExactlyOnceAdmission."""
        now = self.clock.now
        answers = [r.health() for r in self.pool]
        for h in answers:
            if h.state.value != "Unreachable":
                self.last_answers[h.pod] = h
        self.leaving, left = unrecorded.settle(self.leaving, {r.name for r in self.pool}, self.carried, now, DRAIN_S)
        self.carried &= set(self.leaving)
        self.window_open = unrecorded.assess(self.window_open, answers, self.gone + left, now)
        self.gone = []
        if not self.operator_reads_claims:
            answers = [dataclasses.replace(h, redis=None, claims=type(h.claims)()) for h in answers]
        self.holders = claim_risk.remember(self.holders, answers, {r.name for r in self.pool}, now)
        self.said = _exactly_once(answers, not self.redis.paused, self.window_open, now,
                                  claim_risk.silent(self.holders, answers), [w.last for w in self.leaving.values()])
        self.next_poll = now + POLL_S

    def _went_away(self, r: Replica, carried: bool) -> None:
        """As loop/controller: a pod gone whose last answer left a journal waits for its stop's word."""
        last = self.last_answers.pop(r.name, None)
        now = r.health()
        if now.state.value == "Unreachable" and last is not None:  # went away unheard: as loop/controller
            last = claim_risk.left_by(self.holders[r.name]) if r.name in self.holders else claim_risk.unheard(now)
        if last is None:
            return
        if unrecorded.leaves_a_journal(last):
            self.leaving.setdefault(r.name, unrecorded.Leaving(last, self.clock.now))
            if carried:
                self.carried.add(r.name)
        else:
            self.gone.append(last)

    # the operations
    def advance(self, seconds: float, polls: bool = True) -> None:
        """Time passes, in steps of at most a second: each replica's timers, the operator's poll
        (``polls=False``: one poll at the end, where nothing is delivered meanwhile; what the
        replicas tell of the past, their counts and times, it reads then)."""
        end = self.clock.now + seconds
        while self.clock.now < end:
            self.clock.now += min(1.0, end - self.clock.now)
            for r in self.pool:
                r.timers()
            if polls and self.clock.now >= self.next_poll:
                self.poll()
            check_claims(self)
        if not polls:
            self.poll()

    def close(self) -> None:
        """The requests still suspended are dropped (their process is gone), each in its context."""
        for r in self.pool:
            for run in r.in_flight:
                run.context.run(run.coroutine.close)
            r.in_flight = []

    def deliver(self, replica: int, msg: str) -> str:
        self.delivered.add(msg)
        told = self.replica(replica).deliver(msg)
        if told in ("deduplicated", "accepted"):
            self.deduplicated.add(msg)
        return told

    def _end(self, replica: int, which: int, outcome: str) -> None:
        r = self.replica(replica)
        if r.in_flight and not r.paused:
            self.runs.append(r.end(r.in_flight[which % len(r.in_flight)], outcome))
        elif r.groups and not r.paused and outcome == "ok":  # a coalesced group runs (its record was written)
            self.runs.append(r.run_group(r.groups[which % len(r.groups)]))

    def finish(self, replica: int, which: int) -> None:
        self._end(replica, which, "ok")

    def fail(self, replica: int, which: int) -> None:
        """The agent's turn fails (500: the claim is released, the provider retries)."""
        self._end(replica, which, "error")

    def kill(self, replica: int) -> None:
        """No drain (SIGKILL, a force delete, a lost node): its turns never answer, its journal is gone."""
        i = replica % len(self.pool)
        r = self.pool[i]
        for run in r.in_flight:  # never answered: the process is gone
            run.context.run(run.coroutine.close)
        self.dead[r.token] = self.clock.now
        self._went_away(r, carried=False)
        self.pool[i] = self._new()
        self._spells()

    def stop(self, replica: int, cut: bool = False) -> None:
        """A graceful stop: in-flight turns finish (the drain) or, ``cut``, the drain ends with them
        running (uvicorn cancels them: the endpoint releases their claims and answers 503); the
        journal is carried to Redis if it takes it (gwop_serve.carry, one attempt here), then this
        replica's claims are released. A paused replica is resumed first (SIGTERM waits for SIGCONT)."""
        i = replica % len(self.pool)
        r = self.pool[i]
        self.unpause(i)
        for run in list(r.in_flight):
            self.runs.append(r.end(run, "cancel" if cut else "ok"))
        if self.carry_at_stop:
            try:
                r.journal.flush()
                r.journal.settle_contested()
            except Exception:  # noqa: BLE001 - as carry: Redis unusable, what is left is lost
                pass
        carried = self.carry_at_stop and not r.journalled()
        try:
            release_unfinished_claims(r.leases, r.journal)
        except Exception:  # noqa: BLE001
            pass
        if self.watch:  # its drain and carry take seconds, while the operator still hears it
            self.poll()
        self.dead[r.token] = self.clock.now
        self._went_away(r, carried)
        self.pool[i] = self._new()
        self._spells()

    def pause_replica(self, replica: int) -> None:
        """SIGSTOP: nothing of it runs until unpause."""
        r = self.replica(replica)
        if not r.paused:
            r.paused, r.paused_at = True, self.clock.now

    def unpause(self, replica: int) -> None:
        """SIGCONT: the overdue timers fire at once, then the requests that waited in its socket run
        (their provider gave up on them long ago: what they are answered goes nowhere)."""
        r = self.replica(replica)
        if not r.paused:
            return
        r.paused, r.resumed = False, self.clock.now
        r.timers()
        waiting, r.socket = r.socket, []
        for msg in waiting:
            r.deliver(msg)

    def finish_mid_flush(self, replica: int, which: int) -> None:
        """The replica's turn ``which`` ends on its event loop just as its journal's thread has
        written that turn's key to Redis (the flush carrying what it journalled), before the thread
        notes it: in the pod the two run at once."""
        r = self.replica(replica)
        if r.in_flight and not r.paused:
            run = r.in_flight[which % len(r.in_flight)]
            r.meanwhile = (PREFIX + run.msg, lambda: run in r.in_flight and self.runs.append(r.end(run, "ok")))

    def busy(self, replica: int, seconds: float) -> None:
        """The agent's calls hold the replica's default executor for ``seconds``: what goes through it
        waits (the launcher's own work did before issue 56: ``journal_on_the_pool``,
        ``renewals_on_the_pool``); the turns go on."""
        r = self.replica(replica)
        r.pool_busy_until = max(r.pool_busy_until, self.clock.now + seconds)

    def late(self, replica: int, seconds: float) -> None:
        """The replica's next renewal round comes ``seconds`` late (whatever runs it: a starved thread,
        a slow answer)."""
        self.replica(replica).next_renewal += seconds

    def hide(self, replica: int, hidden: bool) -> None:
        """The operator cannot reach (or reaches again) the replica's /health."""
        self.replica(replica).hidden = hidden

    def pause(self) -> None:
        self.redis.paused = True
        self._spells()

    def resume(self) -> None:
        self.redis.resume()
        self._spells()

    def cut(self, replica: int, off: bool) -> None:
        self.replica(replica).cut_off = off
        self._spells()

    def refuse_writes(self, on: bool) -> None:
        self.redis.oom = on
        self._spells()

    def flush(self) -> None:
        for key in self.redis.data:
            self.redis.note(key, "flushed")
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
        for i, r in enumerate(self.pool):
            r.cut_off = r.hidden = False
            self.unpause(i)
        self.redis.oom = False
        self.resume()


def _exactly_once(answers: list[ReplicaHealth], reachable: bool, window: unrecorded.Unrecorded,
                  now: float, silent: Sequence[claim_risk.Holder] = (),
                  leaving: Sequence[ReplicaHealth] = ()) -> tuple[str, str, str]:
    """ExactlyOnceAdmission as conditions.compute says it over these facts (one Redis-backed
    GatewayDeployment, every replica running and ready)."""
    n = len(answers)
    probe = (ProbeResult(True, R.PROBE_SUCCEEDED, "the probe's SET NX PX round trip worked") if reachable
             else ProbeResult(False, R.CONNECTION_FAILED, "no answer within the probe's timeout"))
    facts = conditions.Facts(generation=1, desired_replicas=n, store_backend="redis", policy="Refuse",
                             persistence=True, redis_configured=True, running_replicas=n, ready_replicas=n,
                             updated_replicas=n, rollout_observed=True, current_replicas=n, probe=probe,
                             health=tuple(answers), unrecorded=window, now=now, sessions_store="redis",
                             silent_holders=tuple(silent), leaving=tuple(leaving))
    said = next(c for c in conditions.compute(facts) if c.type == conditions.EXACTLY_ONCE)
    return said.status, said.reason, said.message


#: each operation an interleaving is made of: (sim, replica, message name, message index, seconds)
ACTIONS: dict[str, Callable[[Sim, int, str, int, float], Any]] = {
    "deliver": lambda sim, replica, name, _, __: sim.deliver(replica, name),
    "finish": lambda sim, replica, _, which, __: sim.finish(replica, which),
    "fail": lambda sim, replica, _, which, __: sim.fail(replica, which),
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
    "stop_cut": lambda sim, replica, *_: sim.stop(replica, cut=True),
    "sigstop": lambda sim, replica, *_: sim.pause_replica(replica),
    "sigcont": lambda sim, replica, *_: sim.unpause(replica),
    "finish_mid_flush": lambda sim, replica, _, which, __: sim.finish_mid_flush(replica, which),
    "busy": lambda sim, replica, _, __, seconds: sim.busy(replica, seconds),
    "late": lambda sim, replica, _, __, seconds: sim.late(replica, seconds),
    "hide": lambda sim, replica, *_: sim.hide(replica, True),
    "show": lambda sim, replica, *_: sim.hide(replica, False),
}
OPS = tuple(ACTIONS)


#: ops played by ``play`` in this process (the exploration's budget is counted in them)
STEPS = [0]


def play(sim: Sim, ops: Iterable[tuple[str, int, int, float]], messages: int = 6) -> Sim:
    """Apply each ``(op, replica, message, seconds)``; then heal everything, let one lease and the
    window pass, and retry every webhook never answered (the provider's retries)."""
    for op, replica, msg, seconds in ops:
        ACTIONS[op](sim, replica, f"m{msg % messages}", msg, seconds)
        if sim.watch:
            sim.poll()
        STEPS[0] += 1
        check_claims(sim)
    sim.heal()
    sim.advance(max(sim.lease, sim.window) + 5, polls=False)
    check_claims(sim)
    for r in sim.pool:  # turns still running end (a provider's retry meanwhile is told "in progress")
        for run in list(r.in_flight):
            sim.runs.append(r.end(run, "ok"))
        for run in list(r.groups):  # and the coalesced groups of the replicas still running run
            sim.runs.append(r.run_group(run))
    sim.advance(2, polls=False)
    answered = {run.msg for run in sim.runs if run.answered}
    for msg in sorted(sim.deduplicated - answered):
        raise AssertionError(f"{msg}: its provider was answered 2xx (deduplicated, or accepted for a coalesced run), "
                             f"and no turn of it completed: lost (Redis: {sim.redis.said(PREFIX + msg)})")
    for i in range(messages):
        msg = f"m{i}"
        if msg in answered or msg not in sim.delivered:
            continue
        outcome = next((o for o in (sim.deliver(k, msg) for k in range(len(sim.pool))) if o == "ran"), None)
        assert outcome == "ran", f"{msg} was never answered and its retry is not admitted: lost"
        r = next(r for r in sim.pool if any(run.msg == msg for run in r.in_flight))
        sim.runs.append(r.end(next(run for run in r.in_flight if run.msg == msg), "ok"))
    # and the provider delivers every answered webhook once more, to every replica: each must be
    # refused (check() judges any that runs)
    for msg in sorted({run.msg for run in sim.runs if run.answered}):
        for k in range(len(sim.pool)):
            if sim.deliver(k, msg) == "ran":
                sim.runs.append(sim.pool[k].end(sim.pool[k].in_flight[-1], "ok"))
    # and what a replica admitted without a record in Redis is carried there: every turn ended and
    # Redis usable for a lease, no journal holds anything (AdmissionsNotRecorded ends with it)
    sim.advance(sim.lease, polls=False)
    for r in sim.pool:
        assert not r.journalled(), (f"{r.name}'s journal still holds {', '.join(sorted(r.journalled()))} "
                                    f"{sim.lease:g} s after every turn ended with Redis usable: never carried")
    return sim


def check_claims(sim: Sim) -> None:
    """No claim of a dead holder outlives PROMISED_CLAIM_FREE_S after its death, or after Redis
    was last usable again (a claim a paused Redis ran on resuming starts its lease then)."""
    for key in list(sim.redis.data):
        token = sim.redis.value(key) or ""
        died = next((at for process, at in sim.dead.items() if token.startswith(process)), None)
        if died is None:
            continue
        since = max([died] + [t for t in sim.usable_again if t >= died])
        assert sim.clock.now - since <= PROMISED_CLAIM_FREE_S, \
            f"{key} is still claimed by a holder that died {sim.clock.now - died:.0f} s ago"


def check(sim: Sim) -> None:
    """The invariants over a played interleaving (see the module's docstring)."""
    for run in sim.runs:
        assert run.owner_said or not run.best_effort, \
            (f"{run.msg}: {run.replica} admitted it best-effort at {at(run.admitted)} while its own /health did not "
             f"list durability:idempotency (IdempotencyDegraded does not count it)")
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
            status, reason, _ = again.said
            # announced before the second admission, or Redis forgot the record between the two
            explained = status != "True" or any(first.admitted <= t <= again.admitted for t in sim.forgets)
            assert explained, (f"{msg} answered twice, silently: by {first.replica} (admitted at {at(first.admitted)}"
                               f"{', best-effort' if first.best_effort else ''}) and {again.replica} (at "
                               f"{at(again.admitted)}{', best-effort' if again.best_effort else ''}), "
                               f"ExactlyOnceAdmission {status} {reason} at the operator's last poll before it; "
                               f"Redis until then: {sim.redis.said(PREFIX + msg, again.admitted)}")


def patched(clock: Clock) -> Callable[[], None]:
    """The pod code's clock and thread hop are the simulation's; returns the undo."""
    import logging
    import gwop_redis
    store_log = logging.getLogger("praisonai_bot")
    level = store_log.level
    store_log.setLevel(logging.ERROR)  # 0.1.16's store warns at every failed call
    shim = types.SimpleNamespace(**{k: getattr(asyncio, k) for k in dir(asyncio) if not k.startswith("_")})
    shim.to_thread = _inline
    quiet = lambda *_: None  # noqa: E731
    replaced = [(gwop_journal, "time", clock), (gwop_leases, "time", clock), (gwop_health, "time", clock),
                (gwop_redis, "time", clock), (gwop_journal, "asyncio", shim), (gwop_journal, "off_loop", _inline), (gwop_journal, "say", quiet),
                (gwop_leases, "say", quiet), (gwop_redis, "say", quiet)]
    import gwop_claims
    replaced.append((gwop_claims, "say", quiet))
    saved = [(module, name, getattr(module, name)) for module, name, _ in replaced]
    for module, name, value in replaced:
        setattr(module, name, value)

    def undo() -> None:
        for m, n, v in saved:
            setattr(m, n, v)
        store_log.setLevel(level)
    return undo
