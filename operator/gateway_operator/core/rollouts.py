"""Rollouts the operator itself causes, a few at a time (pure; the clock is an input).

A new operator release can change every gateway's pod template at once (its launcher ships in
the ConfigMap whose hash the template carries, a rendered default changes): without a cap every
GatewayDeployment would roll in the same minute, cutting in-flight turns everywhere. Such a
rollout is recognised by what did *not* change: the spec (status.observedGeneration is the
generation) and the Secrets the pods read (the template's secrets-revision), while the template
would. At most ``limit`` of those run at a time, operator-wide; the others keep their pods (the
Deployment and the ConfigMap are held as they are) and say ``OperatorUpgradeQueued``. A user's
own change is never queued.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Mapping

from gateway_operator import api
from gateway_operator.core.pods import LiveDeployment

DEFAULT_LIMIT = 2
#: a slot whose rollout never completes is given back after this long (a stuck rollout must not
#: hold every other GatewayDeployment's upgrade for ever); its own rollout goes on regardless
SLOT_TIMEOUT = 900.0

Key = tuple[str, str]


class RolloutState(str, enum.Enum):
    """A GatewayDeployment's rollout as far as the cap is concerned (status reads it)."""

    NONE = ""                # no rollout the operator causes itself
    QUEUED = "queued"        # one would run: it waits for a slot, the pods kept as they are
    OPERATOR = "operator"    # one runs in its slot


def operator_caused(generation: int, observed_generation: int, live: LiveDeployment, desired: Mapping[str, Any],
                    revision: str) -> bool:
    """Would applying ``desired`` (the rendered Deployment) roll the pods though neither the spec
    nor a Secret changed? For a Deployment an older operator wrote (no template hash recorded),
    by the ConfigMap's hash alone: the launcher and gateway.yaml are what releases change."""
    if generation != observed_generation or live.secrets_revision != revision:
        return False
    if live.template_hash:
        return live.template_hash != (desired["metadata"].get("annotations") or {}).get(api.ANNOTATION_TEMPLATE_HASH)
    template_annotations = desired["spec"]["template"]["metadata"].get("annotations") or {}
    return live.config_hash != template_annotations.get(api.ANNOTATION_CONFIG_HASH)


@dataclass
class RolloutGate:
    limit: int = DEFAULT_LIMIT   # 0: no cap
    slot_timeout: float = SLOT_TIMEOUT
    #: who holds a slot: since when, and the Deployment generation that carries the new template
    rolling: dict[Key, tuple[float, int]] = field(default_factory=dict)
    #: who waits for a slot (its last full pass found its rollout operator-caused and held it)
    waiting: set[Key] = field(default_factory=set)

    def admit(self, key: Key, now: float) -> bool:
        """May ``key`` start (or go on with) its operator-caused rollout now?"""
        for other, (since, _) in list(self.rolling.items()):
            if now - since > self.slot_timeout:
                del self.rolling[other]
        if key in self.rolling or not self.limit or len(self.rolling) < self.limit:
            self.rolling.setdefault(key, (now, 0))
            self.waiting.discard(key)
            return True
        self.waiting.add(key)
        return False

    def not_held(self, key: Key) -> None:
        """A full pass found nothing of ``key``'s to hold (its rollout is no longer operator-caused)."""
        self.waiting.discard(key)

    def queued(self, key: Key) -> bool:
        return key in self.waiting

    def applied(self, key: Key, deployment_generation: int) -> None:
        """The new template is written: the Deployment's generation that carries it."""
        if key in self.rolling:
            self.rolling[key] = (self.rolling[key][0], deployment_generation)

    def settle(self, key: Key, observed_generation: int, rolled_out: bool) -> bool:
        """Gives the slot back once the Deployment controller has seen the new template and every
        replica is updated and ready; True while ``key`` still rolls."""
        if key not in self.rolling:
            return False
        generation = self.rolling[key][1]
        if generation and observed_generation >= generation and rolled_out:
            del self.rolling[key]
            return False
        return True

    def done(self, key: Key) -> None:
        """It went away (deleted, or its loop stopped)."""
        self.rolling.pop(key, None)
        self.waiting.discard(key)

    def holds(self, key: Key) -> bool:
        return key in self.rolling
