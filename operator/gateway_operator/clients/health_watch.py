"""Health as a watch: one long-poll per replica to its launcher's ``GET /health?wait=S&since=TAG``
(pod/gwop_watch.py, on api.WATCH_PORT), on a connection kept alive across answers.

The launcher answers when the replica's health changes, else after ``S`` (the poll interval), so
a change in a replica's degraded owners reaches its GatewayDeployment's loop within the
launcher's tick, and a silent replica still answers once an interval. Each answer that brings a
change calls ``news`` (the loop publishes it: schedule.health_news); every answer calls
``answered`` (the poll counter). A replica whose watch does not answer as the launcher does
(another image, an older launcher, a port refused, an answer without the tag) is polled by the
loop as before (health_poll.Poller) while the watch is tried again later (schedule.watch_retry);
a watch that fails after it answered wakes the loop (``news``), which polls that replica at once.
A replica whose last answer said it holds claims is asked to answer every
schedule.HOLDER_HEARD_S and waited for HOLDER_TIMEOUT_S past that: one paused mid-turn is noticed
within seconds, well within its claim lease (claim_risk.py).

What a replica answers is the tenant's: read with the same bounds as a poll (health_poll._Exchange:
the head's size, the body's, and a deadline of the wait plus the poll timeout).
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from gateway_operator.clients.fair_timeout import fair_timeout
from gateway_operator.clients.health_poll import _Exchange, _Failed, watch_request
from gateway_operator.core import schedule
from gateway_operator.core.health import Idempotency, ReplicaHealth, Target, parse_answer

log = logging.getLogger(__name__)


class _NotServed(Exception):
    """The port answered, but not as the launcher's watch does."""


@dataclass
class _Followed:
    target: Target
    task: asyncio.Task[None] | None = None
    last: ReplicaHealth | None = None   # its last answer, while the watch works
    at: float = float("-inf")           # ... when it came (monotonic)
    failures: int = 0                   # failed asks in a row
    exchange: _Exchange | None = None   # the kept connection


@dataclass
class Watch:
    """One GatewayDeployment's health watches: one per replica it is told to ``follow``."""

    news: Callable[[], None] = lambda: None                     # an answer brought a change
    answered: Callable[[ReplicaHealth], None] = lambda _: None  # every answer (the poll counter)
    interval: float = 10.0
    timeout: float = 3.0
    _followed: dict[str, _Followed] = field(default_factory=dict)

    def follow(self, targets: Sequence[Target], interval: float, timeout: float) -> None:
        """Watch these replicas (the launcher's watch port of each), and no other: a replica gone,
        or at another address, has its watch stopped."""
        self.interval, self.timeout = interval, timeout
        wanted = {t.pod: t for t in targets}
        for pod, followed in list(self._followed.items()):
            if wanted.get(pod) != followed.target:
                self._stop(self._followed.pop(pod))
        for pod, target in wanted.items():
            if pod not in self._followed:
                followed = self._followed[pod] = _Followed(target)
                followed.task = asyncio.ensure_future(self._run(followed))

    def answer(self, pod: str, now: float) -> ReplicaHealth | None:
        """The replica's last watched answer while it stands in for a poll, else None (poll it)."""
        followed = self._followed.get(pod)
        if followed is None or followed.last is None:
            return None
        return followed.last if schedule.watch_stands(followed.at, now, self.interval, self.timeout) else None

    @property
    def watching(self) -> int:
        """Replicas whose watch answers."""
        return sum(1 for f in self._followed.values() if f.last is not None)

    def close(self) -> None:
        for followed in self._followed.values():
            self._stop(followed)
        self._followed.clear()

    def _stop(self, followed: _Followed) -> None:
        if followed.task is not None:
            followed.task.cancel()
        if followed.exchange is not None:
            followed.exchange.close()

    async def _run(self, followed: _Followed) -> None:
        since, due = "", None
        while True:
            asked = time.monotonic()
            due = schedule.watch_due(due, asked, self.interval)
            wait = schedule.watch_wait(due - asked, followed.last)
            try:
                health, tag = await self._ask(followed, wait, since)
            except (OSError, TimeoutError, _Failed, _NotServed) as e:
                if followed.exchange is not None:
                    followed.exchange.close()
                    followed.exchange = None
                if followed.failures == 0:
                    log.debug("health watch of pod %s failed (%s): polled instead", followed.target.pod,
                              type(e).__name__)
                stood, followed.last, since, due = followed.last, None, "", None
                if stood is not None:
                    self.news()   # its answer no longer stands: the loop polls it now, not at the next interval
                await asyncio.sleep(schedule.watch_retry(followed.failures))
                followed.failures += 1
                continue
            except Exception as e:  # noqa: BLE001 - a surprise in one replica's watch never ends it
                log.warning("health watch of pod %s failed: %s", followed.target.pod, type(e).__name__)
                stood, followed.last, since, due = followed.last, None, "", None
                if stood is not None:
                    self.news()
                await asyncio.sleep(schedule.watch_retry(followed.failures))
                followed.failures += 1
                continue
            # news: the tag moved (or it is the first answer), or a duration crossed a bound it asked
            # for; else it is the silent answer that was due, and the next one is due an interval on
            news = tag != since or wait < schedule.watch_wait(due - asked, None)
            if not news:
                due += self.interval
            followed.last, followed.at, followed.failures, since = health, time.monotonic(), 0, tag
            self.answered(health)
            if news:
                self.news()
            gap = schedule.WATCH_MIN_GAP_S - (time.monotonic() - asked)
            if gap > 0:
                await asyncio.sleep(gap)

    async def _ask(self, followed: _Followed, wait: float, since: str) -> tuple[ReplicaHealth, str]:
        target = followed.target
        # a holder of claims is waited for no longer than HOLDER_TIMEOUT_S past its wait (schedule.py)
        async with fair_timeout(wait + schedule.answer_timeout(self.timeout, followed.last)):
            exchange = followed.exchange
            if exchange is None or not exchange.open or exchange.answer is not None:
                if exchange is not None:
                    exchange.close()
                _, exchange = await asyncio.get_running_loop().create_connection(_Exchange, target.ip, target.port)
                followed.exchange = exchange
            status, body = await exchange.ask(watch_request(target, wait, since))
        tag = exchange.etag
        if status != 200 or not tag:
            raise _NotServed(status)
        if not (exchange.open and exchange.keep):
            exchange.close()
            followed.exchange = None
        health = parse_answer(target.pod, status, body)
        if health.state is Idempotency.UNKNOWN:  # 200 with a tag, but not a /health body
            raise _NotServed(status)
        return health, tag
