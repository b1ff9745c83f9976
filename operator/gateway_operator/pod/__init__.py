"""Code that runs in the gateway pods, not in the operator: ``launch.py`` and its ``gwop_*.py``
modules ship in each GatewayDeployment's ConfigMap (``pod_code`` below, read once by the operator's
entry points and handed to the render as an input), mounted as one directory, and start the
gateway there. They import each other by their flat names (the directory is ``sys.path[0]`` of
``python3 launch.py``) and nothing of the operator (the pods have only the gateway's packages).
The names they share with the operator are declared once, in ``gwop_contract`` (standard library
only), which the operator imports as ``gateway_operator.pod.gwop_contract``
(tests/unit/test_contract.py)."""
from __future__ import annotations

import functools
from pathlib import Path

POD_CODE_DIR = Path(__file__).parent  # launch.py and gwop_*.py


@functools.cache
def pod_code() -> dict[str, str]:
    """The pods' launcher and its modules, by ConfigMap key (the file name), read once: they ship
    inside the operator's package and never change while the operator runs. The render takes
    them as an input (``core.render.objects.desired_objects``): the pure core reads no file."""
    return {path.name: path.read_text() for path in sorted(POD_CODE_DIR.glob("*.py")) if path.name != "__init__.py"}
