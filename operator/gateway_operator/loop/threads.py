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
import functools
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
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    _busy += 1   # one event loop: no lock
    try:
        return await asyncio.get_running_loop().run_in_executor(_prompt_executor(), call)
    finally:
        _busy -= 1
