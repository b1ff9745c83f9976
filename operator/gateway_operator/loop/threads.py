"""Where a loop's blocking calls (the API client, a render) run: the shared executor, or, for the
pass and the status write of a spec nobody has reconciled yet, a few threads of their own.

A user who changes a spec waits for it; a routine pass (an observation, a resync, the first pass
of each loop of a shard just taken over) does not. With one executor a spec change queues behind
every routine call ahead of it: after a takeover, behind the first reads of every adopted loop.
The call carries its context (``asyncio.to_thread`` does the same): the GatewayDeployment it acts
for (clients/kube.ACTING_FOR) goes with it.
"""
from __future__ import annotations

import asyncio
import contextvars
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

T = TypeVar("T")

#: set in the task of a pass (or around a status write) for a generation not yet reconciled
PROMPT: contextvars.ContextVar[bool] = contextvars.ContextVar("gwop_prompt", default=False)
PROMPT_THREADS = 4
_prompt: ThreadPoolExecutor | None = None
_busy = 0   # calls on the prompt threads now


def _prompt_executor() -> ThreadPoolExecutor:
    global _prompt
    if _prompt is None:
        _prompt = ThreadPoolExecutor(max_workers=PROMPT_THREADS, thread_name_prefix="kube-prompt")
    return _prompt


async def run(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` on a thread: under ``PROMPT`` a prompt one while one is idle, else
    the loop's default executor (handlers.configure sizes it). Never queued on the prompt ones: a
    wave of new GatewayDeployments is all prompt work, and four threads would be its bottleneck."""
    global _busy
    if not (PROMPT.get() and _busy < PROMPT_THREADS):
        return await asyncio.to_thread(fn, *args, **kwargs)
    loop = asyncio.get_running_loop()
    submitted = _prompt_executor().submit(contextvars.copy_context().run, fn, *args, **kwargs)
    _busy += 1   # counted on the event loop only: no lock
    # the slot is free when its thread is, not when the caller stops waiting (a cancelled pass's
    # call runs on): else a fifth prompt call would queue behind four busy threads
    submitted.add_done_callback(lambda _: _free_soon(loop))
    return await asyncio.wrap_future(submitted, loop=loop)


def _free_soon(loop: asyncio.AbstractEventLoop) -> None:
    """A prompt thread's call ended (on that thread): its slot is counted free on the loop."""
    def free() -> None:
        global _busy
        _busy -= 1
    try:
        loop.call_soon_threadsafe(free)
    except RuntimeError:  # that loop has closed (a test's): nobody on it counts any more
        free()
