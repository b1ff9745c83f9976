"""What the gateway keeps in each replica that the operator cannot share: the channel bots that
receive by polling their platform or by holding one connection per token (docs/replica-state.md).
praisonai-bot 0.1.16 starts every configured bot in every process and has no way to run one on a
single replica, so with more than one replica each runs them all. Pure: read from the spec's
gateway.yaml and the names of its env."""
from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, NamedTuple


class Receiving(NamedTuple):
    how: str                       # what N replicas of it do
    webhook_modes: tuple[str, ...]  # channels.<name>.mode values that receive webhooks instead (any replica)


#: platform -> how it receives (0.1.16's adapters; the gateway reads no per-replica mode for any)
RECEIVING_CHANNELS: Mapping[str, Receiving] = {
    "telegram": Receiving("polls getUpdates (Telegram answers a second poller 409 Conflict)", ()),
    "discord": Receiving("holds one gateway session per token: each replica gets and answers every message", ()),
    "slack": Receiving("holds a Socket Mode connection: events and button clicks reach one replica at random", ()),
    "email": Receiving("polls IMAP for unseen mail: each replica may take the same message", ()),
    "signal": Receiving("polls its bridge: each replica may take the same message", ()),
    "whatsapp": Receiving("web mode holds one session per account", ("cloud",)),
    "agentmail": Receiving("polls or holds a websocket", ("webhook",)),
}
#: env names 0.1.16 starts a channel from by itself (auto_enable_from_env, default true)
AUTO_ENABLE_ENV: Mapping[str, str] = {"TELEGRAM_BOT_TOKEN": "telegram", "DISCORD_BOT_TOKEN": "discord",
                                      "SLACK_BOT_TOKEN": "slack", "SLACK_APP_TOKEN": "slack"}
_ENV_REF_RE = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")


def env_names(env: Any) -> set[str]:
    """The names spec.env sets (a list of EnvVar, as written)."""
    return {str(e.get("name")) for e in env if isinstance(e, Mapping)} if isinstance(env, list) else set()


def _has(token: Any, env: set[str]) -> bool:
    """A channel token the pods will have: a literal or a secret reference, or ``${VAR}`` with VAR in
    spec.env (an unset one makes 0.1.16 skip the channel, as the examples' placeholder does)."""
    if isinstance(token, Mapping):
        return True
    text = str(token or "").strip()
    ref = _ENV_REF_RE.match(text)
    return bool(text) and (ref is None or ref.group(1) in env)


def channels_on_every_replica(config: Mapping[str, Any], env: Any, replicas: int) -> list[tuple[str, str]]:
    """(channel, what it does) for each channel bot that more than one replica would run; empty
    with one replica. ``env``: spec.env as written (a list of EnvVar)."""
    if replicas <= 1:
        return []
    names = env_names(env)
    channels = config.get("channels")
    found: list[tuple[str, str]] = []
    for name, channel in (channels.items() if isinstance(channels, Mapping) else ()):
        channel = channel if isinstance(channel, Mapping) else {}
        platform = str(channel.get("platform") or name).lower()
        receiving = RECEIVING_CHANNELS.get(platform)
        if receiving is None or channel.get("enabled") is False:
            continue
        if str(channel.get("mode") or "").lower() in receiving.webhook_modes:
            continue
        if _has(channel.get("token"), names) or (platform == "slack" and _has(channel.get("app_token"), names)):
            found.append((str(name), receiving.how))
    if config.get("auto_enable_from_env", True) is not False:
        named = {n for n, _ in found}
        for var, platform in AUTO_ENABLE_ENV.items():
            if var in names and platform not in named:
                named.add(platform)
                found.append((platform, RECEIVING_CHANNELS[platform].how))
    return found


def channel_warning(replicas: int, found: Iterable[tuple[str, str]]) -> str:
    """The one message: ``gateway-operator check``'s warning and ReplicaSafeChannels=False's."""
    listed = "; ".join(f"{name} {how}" for name, how in found)
    return (f"{replicas} replicas each run the channel bots that receive by polling or a held connection "
            f"({listed}): praisonai-bot runs them on every replica and has no way to run one on a single "
            "replica, so a message can be answered more than once. Run them in a GatewayDeployment of one "
            "replica (with spec.persistence) and keep this one for webhooks, or switch the channel to "
            "webhook mode where it has one (docs/replica-state.md).")
