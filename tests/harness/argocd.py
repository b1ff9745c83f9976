"""Argo CD's view of a GatewayDeployment: the resource health check of docs/argocd-health.lua,
run in a real Lua 5.1 interpreter (lupa; Argo CD runs its checks in gopher-lua, also Lua 5.1)
the way Argo CD calls it: the live object as the global ``obj``, the script returns ``hs``."""
from __future__ import annotations

import re
from typing import Any, Mapping, NamedTuple

import yaml
from lupa import lua51

from .cluster import REPO

SCRIPT = REPO / "docs/argocd-health.lua"
ARGOCD_CM_KEY = "resource.customizations.health.gateway-operator.dev_GatewayDeployment"
README_SECTION = "## Readiness: kubectl wait, helm --wait, Argo CD"


class Health(NamedTuple):
    status: str
    message: str


def health(obj: Mapping[str, Any], script: str | None = None) -> Health:
    lua = lua51.LuaRuntime()
    lua.globals().obj = lua.table_from(obj, recursive=True)
    hs = lua.execute(SCRIPT.read_text() if script is None else script)
    return Health(hs["status"], hs["message"])


def readme_argocd_cm() -> dict[str, Any]:
    """The argocd-cm ConfigMap shown in docs/operations.md's readiness section (its ```yaml block)."""
    readme = (REPO / "docs/operations.md").read_text()
    section = readme[readme.index(README_SECTION):]
    end = section.find("\n## ", 1)
    section = section if end < 0 else section[:end]
    return yaml.safe_load(re.search(r"```yaml\n(.*?)```", section, re.S).group(1))
