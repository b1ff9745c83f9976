"""The pods' code (operator/gateway_operator/pod: launch.py and its gwop_*.py modules) as the pod
runs it: a directory on ``sys.path`` whose modules import each other by their flat names."""
from __future__ import annotations

import sys

from harness.cluster import REPO

POD_CODE = REPO / "operator" / "gateway_operator" / "pod"
LAUNCH = POD_CODE / "launch.py"


def importable() -> None:
    """Put the pod code's directory on ``sys.path`` (once), as ``python3 launch.py`` does."""
    if str(POD_CODE) not in sys.path:
        sys.path.insert(0, str(POD_CODE))
