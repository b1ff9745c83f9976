"""The pods' code (operator/gateway_operator/pod: launch.py and its gwop_*.py modules) as the pod
runs it: a directory on ``sys.path`` whose modules import each other by their flat names."""
from __future__ import annotations

import sys
from typing import Any

from harness.cluster import REPO

POD_CODE = REPO / "operator" / "gateway_operator" / "pod"
LAUNCH = POD_CODE / "launch.py"


def importable() -> None:
    """Put the pod code's directory on ``sys.path`` (once), as ``python3 launch.py`` does."""
    if str(POD_CODE) not in sys.path:
        sys.path.insert(0, str(POD_CODE))


HOOK_PATH = "events"


def documented_config() -> dict[str, Any]:
    """A gateway.yaml in the operator's documented shape, without Redis: one agent, one webhook hook
    (``/hooks/events``, deduplicated by the payload's ``id``) on the Redis store and turn lock."""
    return {
        "gateway": {"host": "127.0.0.1", "port": 8765, "allowed_origins": ["http://127.0.0.1"]},
        "agents": {"assistant": {"instructions": "Reply in one short sentence.", "model": "gpt-4o-mini"}},
        # 0.1.16 demands a channel. A telegram channel whose token env is unset
        # is skipped at start (no network) and only reported as degraded.
        "channels": {"telegram": {"token": "${TEST_UNSET_TELEGRAM_TOKEN}"}},
        "hooks": {
            "idempotency": {"store_backend": "redis"},
            "hooks": [{"path": HOOK_PATH, "message": "Event: {text}", "idempotency_key": "{id}"}],
        },
        "turn_lock": {"backend": "redis"},
    }
