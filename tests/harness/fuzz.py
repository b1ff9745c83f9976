"""Fuzzing GatewayDeployments through the real API server and the running operator (issue 7).

Two halves:

* ``cases(seed, count)``: a seeded, pure generator of adversarial GatewayDeployments. Each
  case starts from a valid base (``gateway_deployment`` / ``redis_store`` of
  harness/operator.py) and applies 1-3 mutations from ``CATALOGUE`` (wrong types, deep and
  huge configs, unicode, bad names, Redis URL/host variants, env and label overrides,
  conflicting idempotency forms, missing or non-UTF-8 Secrets, ...). The first mutation of
  case ``i`` walks a seeded permutation of the whole catalogue, so any ``count`` at least the
  catalogue's size uses every mutation, and ``cases(s, n)`` is a prefix of ``cases(s, m)``
  for ``n <= m``. ``cases_for(seed, labels, start)`` builds one case per named mutation (the
  test slice's sentinels). Manifests may be nested thousands of levels deep: serialise them
  with ``to_json`` (iterative), never ``json.dumps``/``copy.deepcopy``/``repr``.

* ``FuzzRun``: applies the cases in batches (a fresh namespace per batch, one
  ``kubectl create --raw`` per object: kubectl passes the body on unparsed, however deep,
  and every refusal carries the API server's own message),
  waits a bounded time until each accepted object is settled (status.observedGeneration ==
  metadata.generation, and Ready=True, or Stalled=True with a reason and a message, or
  Ready=False/WaitingForRedis with a RedisReachable reason), and meanwhile watches the
  operator (same pid, alive, peak RSS, tracebacks in its log) and an untouched bystander
  GatewayDeployment in its own namespace, patched every ~2 s to measure how long the
  operator takes to observe a new generation. An operator that dies is recorded, its batch
  namespace removed, and (when a restart function is given) restarted so the run goes on.
  An object deleted by someone else (the garbage collector, for a bogus ownerReference) is
  "gone", not unsettled. ``failures(summary)`` says what the issue calls a failure.

Secrets the cases name (the runner creates them in every batch namespace): ``fuzz-redis-auth``
(the real Redis password), ``fuzz-token`` (a valid auth token), ``fuzz-binary`` (values that are
not UTF-8, keys ``password`` and ``token``) and ``fuzz-nokeys`` (neither key).
"""
from __future__ import annotations

import base64
import json
import random
import re
import shutil
import subprocess
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, NamedTuple

from .operator import gateway_deployment, redis_store
from .processes import rss_mib
from .wait import WaitTimeout, until

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
SECRET_REDIS = "fuzz-redis-auth"
SECRET_TOKEN = "fuzz-token"
SECRET_BINARY = "fuzz-binary"
SECRET_NOKEYS = "fuzz-nokeys"
NOT_UTF8 = b"\xff\xfe\xfa not utf-8 \xc3\x28"


class FuzzCase(NamedTuple):
    id: str
    manifest: dict[str, Any]   # namespace-independent; may be very deep: see to_json
    kind: str                  # the mutations applied, e.g. "base:redis & replicas:string"


# -- serialising deep values ------------------------------------------------------------

def to_json(value: Any) -> str:
    """JSON text of ``value`` without recursion (configs here nest 3000+ levels, deeper than
    Python's recursion limit allows json.dumps to go)."""
    out: list[str] = []
    stack: list[Any] = [value]
    encode = json.JSONEncoder(ensure_ascii=False).encode
    while stack:
        item = stack.pop()
        if isinstance(item, _Raw):
            out.append(item.text)
        elif isinstance(item, dict):
            if not item:
                out.append("{}")
                continue
            parts: list[Any] = [_Raw("}")]
            for n, (k, v) in enumerate(reversed(list(item.items()))):
                parts.append(v)
                parts.append(_Raw(encode(str(k)) + ":"))
                if n < len(item) - 1:
                    parts.append(_Raw(","))
            parts.append(_Raw("{"))
            stack.extend(parts)
        elif isinstance(item, list):
            if not item:
                out.append("[]")
                continue
            parts = [_Raw("]")]
            for n, v in enumerate(reversed(item)):
                parts.append(v)
                if n < len(item) - 1:
                    parts.append(_Raw(","))
            parts.append(_Raw("["))
            stack.extend(parts)
        else:
            out.append(encode(item))
    return "".join(out)


class _Raw(NamedTuple):
    text: str


def depth(value: Any) -> int:
    """Nesting depth, iteratively."""
    best, stack = 0, [(value, 1)]
    while stack:
        item, d = stack.pop()
        if isinstance(item, dict):
            best = max(best, d)
            stack.extend((v, d + 1) for v in item.values())
        elif isinstance(item, list):
            best = max(best, d)
            stack.extend((v, d + 1) for v in item)
    return best


# -- building blocks ----------------------------------------------------------------------

def nested_dict(levels: int, leaf: Any = "bottom") -> dict[str, Any]:
    value: Any = leaf
    for n in range(levels):
        value = {f"l{levels - n}": value}
    return value


def nested_list(levels: int, leaf: Any = "bottom") -> list[Any]:
    value: Any = leaf
    for _ in range(levels):
        value = [value]
    return value


UNICODE_SAMPLES = [
    "emoji 🤖🚀🔥 and a flag 🇺🇦", "RTL \u202eevil\u202c override", "zero\u200bwidth\u200djoiner\ufeff",
    "combining e\u0301\u0301\u0301\u0301", "CJK 你好世界 日本語 한국어", "astral 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𓀀",
    "greek Ωμέγα / cyrillic Привет", "math ∑∫√∞≠", "lone-ish \ufffd replacement", "line\u2028sep\u2029para",
]
CONTROL_SAMPLES = ["bell\x07 tab\t cr\r lf\n", "esc\x1b[31mred\x1b[0m", "del\x7f and \x01\x02\x03",
                   "form\x0cfeed\x0bvt", "\x1f unit sep \x1e record sep"]
YAML_TRAPS = ["yes", "no", "on", "off", "~", "null", "0x10", "1e3", "0o17", ": colon", "- dash", "&anchor",
              "*alias", "!!python/object/apply:os.system", "%TAG ! tag:", "? key", "'quote", '"dq', "{a: 1}",
              "[1, 2]", "# comment", "${GATEWAY_REDIS_PASSWORD}", "${GATEWAY_AUTH_TOKEN}", "$(rm -rf /)",
              "---", "...", "<<: *merge"]
ODD_KEYS = ["", " ", "🤖", "a.b.c", "a/b", "${HOME}", "key\x01ctl", "ключ", "k" * 10_000, "__proto__",
            "<<", "null", "0", "true", "\u202e"]


@dataclass
class Ctx:
    index: int
    redis_url: str
    base: str


Mutation = Callable[[random.Random, dict[str, Any], Ctx], None]


def spec_of(m: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(m.get("spec"), dict):
        m["spec"] = gateway_deployment("x")["spec"]
    return m["spec"]


def config_of(m: dict[str, Any]) -> dict[str, Any]:
    spec = spec_of(m)
    if not isinstance(spec.get("config"), dict):
        spec["config"] = gateway_deployment("x")["spec"]["config"]
    return spec["config"]


def hooks_of(m: dict[str, Any]) -> dict[str, Any]:
    config = config_of(m)
    if not isinstance(config.get("hooks"), dict):
        config["hooks"] = {}
    return config["hooks"]


def redis_of(m: dict[str, Any]) -> dict[str, Any]:
    spec = spec_of(m)
    if not isinstance(spec.get("redis"), dict):
        spec["redis"] = {}
    return spec["redis"]


def use_redis_store(m: dict[str, Any]) -> None:
    hooks = hooks_of(m)
    idem = hooks.get("idempotency")
    hooks["idempotency"] = {**(idem if isinstance(idem, dict) else {}), "store_backend": "redis"}


def set_spec(key: str, value: Any) -> Mutation:
    def mutate(rng: random.Random, m: dict[str, Any], ctx: Ctx) -> None:
        spec_of(m)[key] = value() if callable(value) else value
    return mutate


def set_config(key: str, value: Any) -> Mutation:
    def mutate(rng: random.Random, m: dict[str, Any], ctx: Ctx) -> None:
        config_of(m)[key] = value() if callable(value) else value
    return mutate


def set_hooks(key: str, value: Any) -> Mutation:
    def mutate(rng: random.Random, m: dict[str, Any], ctx: Ctx) -> None:
        hooks_of(m)[key] = value() if callable(value) else value
    return mutate


def set_name(make: Callable[[int], str]) -> Mutation:
    def mutate(rng: random.Random, m: dict[str, Any], ctx: Ctx) -> None:
        m["metadata"]["name"] = make(ctx.index)
    return mutate


def redis_url(url: str | Callable[[Ctx], str], password: bool = True) -> Mutation:
    def mutate(rng: random.Random, m: dict[str, Any], ctx: Ctx) -> None:
        use_redis_store(m)
        r = redis_of(m)
        for k in ("host", "port", "db", "managed"):
            r.pop(k, None)
        r["url"] = url(ctx) if callable(url) else url
        if password:
            r["passwordSecretRef"] = {"name": SECRET_REDIS}
    return mutate


def redis_host(host: Any, **extra: Any) -> Mutation:
    def mutate(rng: random.Random, m: dict[str, Any], ctx: Ctx) -> None:
        use_redis_store(m)
        r = redis_of(m)
        r.pop("url", None)
        r.pop("managed", None)
        r["host"] = host
        r.update(extra)
        r["passwordSecretRef"] = {"name": SECRET_REDIS}
    return mutate


def redis_field(**fields: Any) -> Mutation:
    def mutate(rng: random.Random, m: dict[str, Any], ctx: Ctx) -> None:
        use_redis_store(m)
        r = redis_of(m)
        if not (r.get("url") or r.get("host") or r.get("managed")):
            r["url"] = ctx.redis_url
            r["passwordSecretRef"] = {"name": SECRET_REDIS}
        r.update(fields)
    return mutate


def add_env(*entries: Any) -> Mutation:
    def mutate(rng: random.Random, m: dict[str, Any], ctx: Ctx) -> None:
        spec = spec_of(m)
        env = spec.get("env") if isinstance(spec.get("env"), list) else []
        spec["env"] = [*env, *entries]
    return mutate


def pod_labels(labels: Any) -> Mutation:
    return set_spec("podLabels", labels)


def pod_annotations(annotations: Any) -> Mutation:
    return set_spec("podAnnotations", annotations)


def deep_in_config(levels: int, shape: str = "dict", where: str = "extra") -> Mutation:
    def mutate(rng: random.Random, m: dict[str, Any], ctx: Ctx) -> None:
        value = nested_dict(levels) if shape == "dict" else nested_list(levels)
        if where == "agents":
            config_of(m).setdefault("agents", {})
            if isinstance(config_of(m)["agents"], dict):
                config_of(m)["agents"]["deep"] = value
                return
        if where == "hooks":
            hooks = hooks_of(m)
            hooks["hooks"] = [{"path": "deep", "message": "x", "extra": value}]
            return
        if where == "env":
            add_env({"name": "DEEP", "value": "x", "extra": value})(rng, m, ctx)
            return
        if where == "resources":
            spec_of(m)["resources"] = {"limits": {"cpu": "100m"}, "extra": value}
            return
        config_of(m)[where] = value
    return mutate


def wide_config(keys: int) -> Mutation:
    def mutate(rng: random.Random, m: dict[str, Any], ctx: Ctx) -> None:
        config_of(m)["wide"] = {f"key{n:06d}": n for n in range(keys)}
    return mutate


def long_config_string(size: int) -> Mutation:
    def mutate(rng: random.Random, m: dict[str, Any], ctx: Ctx) -> None:
        config_of(m)["blob"] = ("0123456789abcdef" * (size // 16 + 1))[:size]
    return mutate


def unicode_strings(samples: list[str]) -> Mutation:
    def mutate(rng: random.Random, m: dict[str, Any], ctx: Ctx) -> None:
        config = config_of(m)
        agents = config.get("agents") if isinstance(config.get("agents"), dict) else {}
        agent = agents.get("assistant") if isinstance(agents.get("assistant"), dict) else {}
        agent["instructions"] = " | ".join(rng.sample(samples, k=min(3, len(samples))))
        agents["assistant"] = agent
        config["agents"] = agents
        config["notes"] = {f"n{n}": s for n, s in enumerate(samples)}
    return mutate


def odd_keys(rng: random.Random, m: dict[str, Any], ctx: Ctx) -> None:
    config_of(m)["odd"] = {k: f"value for {k[:20]!r}" for k in ODD_KEYS}


def odd_keys_in_agents(rng: random.Random, m: dict[str, Any], ctx: Ctx) -> None:
    config = config_of(m)
    config["agents"] = {k or "_": {"instructions": "x", "model": "gpt-4o-mini"} for k in ODD_KEYS[:8]}


def replicas_redis(n: int) -> Mutation:
    def mutate(rng: random.Random, m: dict[str, Any], ctx: Ctx) -> None:
        redis_field()(rng, m, ctx)
        spec_of(m)["replicas"] = n
    return mutate


def conflicting(form: str) -> Mutation:
    """Two ways of saying which idempotency store to use, disagreeing."""
    def mutate(rng: random.Random, m: dict[str, Any], ctx: Ctx) -> None:
        redis_field()(rng, m, ctx)
        spec_of(m)["replicas"] = 3
        config = config_of(m)
        if form == "hooks_idempotency-dict":
            config["hooks_idempotency"] = {"store_backend": "sqlite"}
        elif form == "hooks_idempotency-str":
            config["hooks_idempotency"] = "sqlite"
        elif form == "idempotency-top":
            config["idempotency"] = "sqlite"
        elif form == "idempotency-top-dict":
            config["idempotency"] = {"store_backend": "sqlite"}
        elif form == "hooks-list":
            config["hooks"] = [{"path": "deploy", "message": "x"}]
            config["hooks_idempotency"] = {"store_backend": "redis"}
        elif form == "hooks-list-sqlite":
            config["hooks"] = [{"path": "deploy", "message": "x"}, {"idempotency": {"store_backend": "redis"}}]
            config["hooks_idempotency"] = {"store_backend": "sqlite"}
        elif form == "hooks-idempotency-backend-key":
            hooks_of(m)["idempotency"] = {"store_backend": "redis", "backend": "sqlite"}
        elif form == "turn_lock-memory":
            config["turn_lock"] = {"backend": "memory"}
        elif form == "push-other":
            config["push"] = {"enabled": True, "backend": "sqlite"}
    return mutate


def secret_ref(field_name: str, ref: Any, redis: bool = False) -> Mutation:
    def mutate(rng: random.Random, m: dict[str, Any], ctx: Ctx) -> None:
        if redis:
            redis_field()(rng, m, ctx)
            redis_of(m)["passwordSecretRef"] = ref
        else:
            spec_of(m)[field_name] = ref
    return mutate


def managed(extra: dict[str, Any] | None = None, replicas: int = 1, keep_url: bool = False) -> Mutation:
    def mutate(rng: random.Random, m: dict[str, Any], ctx: Ctx) -> None:
        use_redis_store(m)
        r = redis_of(m)
        if not keep_url:
            r.pop("url", None)
            r.pop("host", None)
            r.pop("passwordSecretRef", None)
        elif not r.get("url"):
            r["url"] = ctx.redis_url
        r["managed"] = {"enabled": True, **(extra or {})}
        spec_of(m)["replicas"] = replicas
    return mutate


def persistence_many(with_redis: bool) -> Mutation:
    def mutate(rng: random.Random, m: dict[str, Any], ctx: Ctx) -> None:
        if with_redis:
            redis_field()(rng, m, ctx)
        spec_of(m)["persistence"] = {"enabled": True, "size": "1Gi"}
        spec_of(m)["replicas"] = 3
    return mutate


def drop_spec_key(key: str) -> Mutation:
    def mutate(rng: random.Random, m: dict[str, Any], ctx: Ctx) -> None:
        spec_of(m).pop(key, None)
    return mutate


def drop_config_key(key: str) -> Mutation:
    def mutate(rng: random.Random, m: dict[str, Any], ctx: Ctx) -> None:
        config_of(m).pop(key, None)
    return mutate


def whole_spec(value: Any) -> Mutation:
    def mutate(rng: random.Random, m: dict[str, Any], ctx: Ctx) -> None:
        m["spec"] = value
    return mutate


def metadata(**fields: Any) -> Mutation:
    def mutate(rng: random.Random, m: dict[str, Any], ctx: Ctx) -> None:
        m["metadata"].update(fields)
    return mutate


def many_hooks(count: int) -> Mutation:
    def mutate(rng: random.Random, m: dict[str, Any], ctx: Ctx) -> None:
        hooks_of(m)["hooks"] = [{"path": f"h{n}", "message": "Event {text}", "idempotency_key": "{id}"}
                                for n in range(count)]
    return mutate


def random_junk(rng: random.Random, m: dict[str, Any], ctx: Ctx) -> None:
    """A random JSON value under a random spec or config key (seeded)."""
    def junk(d: int) -> Any:
        choice = rng.randrange(8 if d < 4 else 5)
        if choice == 0:
            return rng.randint(-2**63, 2**63 - 1)
        if choice == 1:
            return rng.choice([0.5, -1e308, 1e308, 3.0, -0.0])
        if choice == 2:
            return rng.choice(UNICODE_SAMPLES + CONTROL_SAMPLES + YAML_TRAPS)
        if choice == 3:
            return rng.choice([True, False, None])
        if choice == 4:
            return ""
        if choice == 5:
            return [junk(d + 1) for _ in range(rng.randrange(4))]
        return {rng.choice(ODD_KEYS[:9] + ["a", "b", "c"]): junk(d + 1) for _ in range(rng.randrange(4))}
    target = rng.choice(["spec", "config", "hooks", "redis", "health", "service", "persistence"])
    key = rng.choice(["replicas", "image", "config", "redis", "env", "health", "gateway", "agents", "hooks",
                      "store_backend", "url", "port", "type", "enabled", "intervalSeconds", "extra"])
    container = {"spec": spec_of, "config": config_of, "hooks": hooks_of, "redis": redis_of}.get(target)
    if container is None:
        spec = spec_of(m)
        if not isinstance(spec.get(target), dict):
            spec[target] = {}
        spec[target][key] = junk(0)
    else:
        container(m)[key] = junk(0)


LONG = "x" * 300
CATALOGUE: list[tuple[str, Mutation]] = [
    # -- spec field types and ranges
    *[(f"replicas:{label}", set_spec("replicas", v)) for label, v in [
        ("string", "3"), ("string-1", "1"), ("float", 1.5), ("float-int", 2.0), ("negative", -1),
        ("huge", 10**12), ("int32+1", 2**31), ("101", 101), ("bool", True), ("null", None),
        ("list", [1]), ("object", {"n": 1}), ("zero", 0), ("int64max", 2**63 - 1), ("bigint", 10**30)]],
    *[(f"replicaPolicy:{label}", set_spec("replicaPolicy", v)) for label, v in [
        ("Warn", "Warn"), ("lower", "warn"), ("garbage", "garbage"), ("int", 7), ("empty", ""), ("null", None)]],
    ("replicaPolicy:Warn+replicas3", lambda r, m, c: (set_spec("replicaPolicy", "Warn")(r, m, c),
                                                      set_spec("replicas", 3)(r, m, c))),
    ("replicaPolicy:Warn+replicas100", lambda r, m, c: (set_spec("replicaPolicy", "Warn")(r, m, c),
                                                        set_spec("replicas", 100)(r, m, c))),
    *[(f"image:{label}", set_spec("image", v)) for label, v in [
        ("empty", ""), ("int", 5), ("5000chars", "x" * 5000), ("spaces", "has spaces:tag"),
        ("unicode", "ünïcödé/img:🤖"), ("bad-digest", "img@sha256:zz"), ("port", "registry.invalid:99999/img:t"),
        ("null", None), ("list", ["img"])]],
    *[(f"imagePullPolicy:{label}", set_spec("imagePullPolicy", v)) for label, v in [
        ("Sometimes", "Sometimes"), ("int", 1), ("Never", "Never")]],
    *[(f"imagePullSecrets:{label}", set_spec("imagePullSecrets", v)) for label, v in [
        ("string", "regcred"), ("empty-name", [{"name": ""}]), ("no-name", [{}]), ("strings", ["regcred"]),
        ("300chars", [{"name": "a" * 300}]), ("invalid-name", [{"name": "Not/A Name"}]), ("object", {"name": "x"}),
        ("null-name", [{"name": None}]), ("missing", [{"name": "does-not-exist"}]),
        ("many", [{"name": f"s{n}"} for n in range(200)])]],
    *[(f"resources:{label}", set_spec("resources", v)) for label, v in [
        ("string", "lots"), ("bad-cpu", {"limits": {"cpu": "lots"}}), ("requests-string", {"requests": "x"}),
        ("negative", {"requests": {"memory": "-1Gi"}}), ("request>limit", {"requests": {"cpu": "2"},
                                                                            "limits": {"cpu": "1"}}),
        ("unknown-resource", {"limits": {"example.com/thing": "1", "bogus": "x"}}), ("list", [1, 2]),
        ("huge", {"limits": {"memory": "99999999999999999999Ei"}}), ("float", {"limits": {"cpu": 0.5}})]],
    *[(f"service:{label}", set_spec("service", v)) for label, v in [
        ("ExternalName", {"type": "ExternalName"}), ("port0", {"port": 0}), ("port-string", {"port": "80"}),
        ("NodePort", {"type": "NodePort", "port": 8765}), ("string", "ClusterIP")]],
    *[(f"nodeSelector:{label}", set_spec("nodeSelector", v)) for label, v in [
        ("int-value", {"a": 1}), ("bad-key", {"not a key!": "x"}), ("unicode", {"zone": "日本"}),
        ("list", ["a"])]],
    *[(f"tolerations:{label}", set_spec("tolerations", v)) for label, v in [
        ("bogus-effect", [{"key": "k", "effect": "Bogus"}]), ("string", "all"), ("ints", [1, 2]),
        ("operator-garbage", [{"key": "k", "operator": "Maybe"}])]],
    *[(f"affinity:{label}", set_spec("affinity", v)) for label, v in [
        ("string-inside", {"nodeAffinity": "x"}), ("unknown", {"bogusAffinity": {}}), ("list", [1])]],
    ("spec:unknown-field", set_spec("unknownField", "x")),
    ("spec:null", whole_spec(None)),
    ("spec:list", whole_spec([1, 2])),
    ("spec:string", whole_spec("spec")),
    ("spec:empty", whole_spec({})),
    ("spec:no-image", drop_spec_key("image")),
    ("spec:no-config", drop_spec_key("config")),
    ("metadata:labels-unicode", metadata(labels={"ok": "ünï"})),
    ("metadata:annotations-huge", metadata(annotations={"a": "x" * 300_000})),
    ("metadata:finalizer", metadata(finalizers=["example.com/never-removed"])),
    ("metadata:ownerRef-bogus", metadata(ownerReferences=[{"apiVersion": "v1", "kind": "ConfigMap", "name": "nope",
                                                           "uid": "00000000-0000-0000-0000-000000000000"}])),
    # -- config forms and types
    *[(f"config:{label}", set_spec("config", v)) for label, v in [
        ("list", [{"agents": {}}]), ("string", "agents: {}"), ("int", 5), ("null", None), ("empty", {}),
        ("agents-only", {"agents": {"a": {}}}), ("channels-only", {"channels": {}})]],
    *[(f"config.gateway:{label}", set_config("gateway", v)) for label, v in [
        ("string", "0.0.0.0:8765"), ("list", ["host"]), ("wrong-types", {"host": 5, "port": "x"}),
        ("origins-string", {"allowed_origins": "*"}), ("port-negative", {"port": -1, "host": "::"}),
        ("null", None), ("origins-unicode", {"allowed_origins": ["http://ünï.example", "🤖"]})]],
    *[(f"config.agents:{label}", set_config("agents", v)) for label, v in [
        ("string", "assistant"), ("list", []), ("null", None), ("agent-string", {"assistant": "x"}),
        ("empty", {})]],
    *[(f"config.channels:{label}", set_config("channels", v)) for label, v in [
        ("string", "telegram"), ("list", []), ("empty", {}), ("null", None)]],
    *[(f"config.hooks:{label}", set_config("hooks", v)) for label, v in [
        ("string", "hooks"), ("list", ["a"]), ("null", None)]],
    *[(f"config.hooks.{label}", set_hooks(key, v)) for label, key, v in [
        ("hooks:string", "hooks", "x"), ("hooks:mixed", "hooks", [1, "x", None, {"path": 5}]),
        ("hooks:null", "hooks", None), ("idempotency:string", "idempotency", "redis"),
        ("idempotency:list", "idempotency", []), ("store:REDIS", "idempotency", {"store_backend": "REDIS"}),
        ("store:int", "idempotency", {"store_backend": 5}), ("store:empty", "idempotency", {"store_backend": ""}),
        ("store:null", "idempotency", {"store_backend": None}),
        ("store:memory", "idempotency", {"store_backend": "memory"}),
        ("store:redis-no-redis", "idempotency", {"store_backend": "redis"})]],
    ("config.hooks.hooks:500", many_hooks(500)),
    *[(f"config.turn_lock:{label}", set_config("turn_lock", v)) for label, v in [
        ("string", "redis"), ("backend-int", {"backend": 5}), ("redis-no-redis", {"backend": "redis"}),
        ("list", [])]],
    *[(f"config.push:{label}", set_config("push", v)) for label, v in [
        ("string", "x"), ("redis", {"redis": {"url": "redis://evil.example:6379/0"}}), ("redis-null", {"redis": None}),
        ("other", {"other": 1}), ("list", [{"redis": {}}])]],
    ("config.push:redis+spec.redis", lambda r, m, c: (redis_field()(r, m, c),
                                                      set_config("push", {"redis": {"url": "redis://x:1/0"}})(r, m, c))),
    # -- depth
    *[(f"deep:{shape}-{n}", deep_in_config(n, shape)) for shape in ("dict", "list") for n in (50, 400, 990, 3000)],
    ("deep:dict-1100", deep_in_config(1100)),
    ("deep:dict-10000", deep_in_config(10_000)),
    ("deep:agents-dict-400", deep_in_config(400, where="agents")),
    ("deep:agents-dict-3000", deep_in_config(3000, where="agents")),
    ("deep:hooks-list-400", deep_in_config(400, "list", where="hooks")),
    ("deep:hooks-list-3000", deep_in_config(3000, "list", where="hooks")),
    ("deep:env-dict-400", deep_in_config(400, where="env")),
    ("deep:env-dict-3000", deep_in_config(3000, where="env")),
    ("deep:resources-dict-3000", deep_in_config(3000, where="resources")),
    # -- size
    *[(f"size:config-string-{n // 1000}k", long_config_string(n)) for n in (200_000, 900_000, 1_400_000, 2_500_000)],
    *[(f"size:config-keys-{n // 1000}k", wide_config(n)) for n in (20_000, 60_000)],
    ("size:podAnnotations-300k", pod_annotations({"big": "y" * 300_000})),
    ("size:podAnnotations-200k", pod_annotations({"big": "y" * 200_000})),
    ("size:podAnnotations-2000keys", pod_annotations({f"example.com/a{n}": "v" for n in range(2000)})),
    ("size:podLabels-500", pod_labels({f"l{n}": "v" for n in range(500)})),
    ("size:env-3000", add_env(*[{"name": f"V{n}", "value": "x" * 100} for n in range(3000)])),
    # -- unicode, control chars, YAML traps
    ("unicode:strings", unicode_strings(UNICODE_SAMPLES)),
    ("unicode:control-chars", unicode_strings(CONTROL_SAMPLES)),
    ("unicode:yaml-traps", unicode_strings(YAML_TRAPS)),
    ("unicode:odd-keys", odd_keys),
    ("unicode:odd-agent-names", odd_keys_in_agents),
    ("unicode:podAnnotations", pod_annotations({"note": "🤖 ünï \u202e ctl\x01"})),
    ("unicode:podLabels", pod_labels({"team": "ünï"})),
    ("unicode:env-value", add_env({"name": "GREETING", "value": "héllo 🤖 \x07"})),
    ("unicode:env-name", add_env({"name": "GRÜSS", "value": "x"})),
    ("unicode:image", set_spec("image", "🤖")),
    ("unicode:redis-prefix", redis_field(prefix="préfixe:")),
    ("redis.prefix:long", redis_field(prefix="p" * 101)),
    ("redis.prefix:empty", redis_field(prefix="")),
    ("redis.prefix:colons", redis_field(prefix=":::")),
    # -- names
    ("name:64", set_name(lambda i: f"fz{i:04d}-" + "a" * 57)),
    ("name:100", set_name(lambda i: f"fz{i:04d}-" + "b" * 93)),
    ("name:dots", set_name(lambda i: f"fz{i:04d}.with.dots")),
    ("name:uppercase", set_name(lambda i: f"FZ{i:04d}")),
    ("name:leading-digit", set_name(lambda i: f"{i:04d}fz")),
    ("name:253", set_name(lambda i: f"fz{i:04d}-" + "c" * 246)),
    ("name:254", set_name(lambda i: f"fz{i:04d}-" + "d" * 247)),
    ("name:240", set_name(lambda i: f"fz{i:04d}-" + "e" * 233)),
    ("name:unicode", set_name(lambda i: f"fz{i:04d}-ünï")),
    ("name:trailing-dash", set_name(lambda i: f"fz{i:04d}-")),
    ("name:double-dash", set_name(lambda i: f"fz{i:04d}--x")),
    ("name:underscore", set_name(lambda i: f"fz{i:04d}_x")),
    ("name:dot-63", set_name(lambda i: f"fz{i:04d}." + "f" * 56)),
    # -- redis.url
    *[(f"redis.url:{label}", redis_url(v)) for label, v in [
        ("valid", lambda c: c.redis_url), ("bad-port", "redis://127.0.0.1:notaport/0"),
        ("port0", "redis://127.0.0.1:0/0"), ("port99999", "redis://127.0.0.1:99999/0"),
        ("port65536", "redis://127.0.0.1:65536/0"), ("port-negative", "redis://127.0.0.1:-1/0"),
        ("no-host", "redis://:6379/0"), ("only-scheme", "redis://"), ("triple-slash", "redis:///0"),
        ("ipv6-broken", "redis://[::1"), ("ipv6-zone", "redis://[fe80::1%eth0]:6379"),
        ("ipv6-loopback", "redis://[::1]:1/0"), ("ipv6-garbage", "redis://[:::]:1/0"),
        ("query-password", "redis://127.0.0.1:1?password=x"), ("query-after-db", "redis://127.0.0.1:1/0?password=x"),
        ("fragment", "redis://127.0.0.1:1#frag"), ("db99", lambda c: c.redis_url.rsplit("/", 1)[0] + "/99"),
        ("db-huge", lambda c: c.redis_url.rsplit("/", 1)[0] + "/99999999999999999999"),
        ("db-leading-zeros", lambda c: c.redis_url.rsplit("/", 1)[0] + "/0000000000001"),
        ("password", "redis://:pw@127.0.0.1:6379/0"), ("user", "redis://user@127.0.0.1:6379/0"),
        ("at-in-host", "redis://a@b@127.0.0.1:6379/0"),
        ("http", "http://127.0.0.1:6379/0"), ("upper-scheme", "REDIS://127.0.0.1:6379/0"),
        ("rediss", "rediss://127.0.0.1:1/0"), ("long-host-2000", "redis://" + "a" * 2000),
        ("long-label-100", "redis://" + "a" * 100 + ".example:6379/0"), ("too-long", "redis://" + "a" * 3000),
        ("space", "redis://ho st:1/0"), ("unicode-host", "redis://hést.example:6379/0"),
        ("percent-host", "redis://%41%42:6379/0"), ("extra-path", "redis://127.0.0.1:6379/0/extra"),
        ("dotdot", "redis://..:6379/0"), ("empty", ""), ("unix", "unix:///tmp/redis.sock"),
        ("nul-like", "redis://127.0.0.1:6379/0\u0000x".replace("\u0000", "%00")),
        ("blackhole", "redis://10.255.255.1:6379/0"), ("unresolvable", "redis://fuzz-redis.invalid:6379/0")]],
    ("redis.url:int", redis_field(url=6379)),
    ("redis.url:list", redis_field(url=["redis://x"])),
    ("redis.url:blackhole+timeout60", lambda r, m, c: (redis_url("redis://10.255.255.1:6379/0")(r, m, c),
                                                       set_spec("health", {"timeoutSeconds": 60})(r, m, c))),
    # -- redis.host / port / db
    *[(f"redis.host:{label}", redis_host(v)) for label, v in [
        ("credentials", ":pw@evil.example"), ("with-port", "host:6380"), ("empty", ""), ("spaces", "  spaced host "),
        ("300chars", "h" * 300), ("253chars", "h" * 253), ("ipv6", "::1"), ("ipv6-brackets", "[::1]"),
        ("unicode", "hóst.example"), ("url", "redis://127.0.0.1:6379"), ("int", 5), ("slash", "a/b"),
        ("localhost-closed", "127.0.0.1")]],
    *[(f"redis.port:{label}", redis_host("127.0.0.1", port=v)) for label, v in [
        ("0", 0), ("70000", 70000), ("string", "6379"), ("float", 6379.5), ("closed", 1)]],
    *[(f"redis.db:{label}", redis_host("127.0.0.1", db=v)) for label, v in [
        ("-1", -1), ("16", 16), ("string", "0"), ("15", 15)]],
    ("redis.tls:string", redis_field(tls={"enabled": "yes"})),
    ("redis.tls:host", redis_host("127.0.0.1", tls={"enabled": True})),
    ("redis:url+host", redis_field(host="127.0.0.1")),
    ("redis:string", set_spec("redis", "redis://127.0.0.1:6379/0")),
    ("redis:empty", set_spec("redis", {})),
    ("redis:store-no-source", lambda r, m, c: (use_redis_store(m), set_spec("redis", {"db": 3})(r, m, c))),
    ("redis:source-store-sqlite", lambda r, m, c: set_spec("redis", {"url": c.redis_url})(r, m, c)),
    # -- env
    *[(f"env:{label}", add_env(*v)) for label, v in [
        ("GATEWAY_AUTH_TOKEN", [{"name": "GATEWAY_AUTH_TOKEN", "value": "stolen"}]),
        ("GATEWAY_REDIS_PASSWORD", [{"name": "GATEWAY_REDIS_PASSWORD", "value": "x"}]),
        ("HOME", [{"name": "HOME", "value": "/"}]), ("PYTHONUNBUFFERED", [{"name": "PYTHONUNBUFFERED", "value": "0"}]),
        ("no-name", [{"value": "x"}]), ("value-int", [{"name": "N", "value": 5}]),
        ("value-object", [{"name": "N", "value": {"a": 1}}]), ("name-int", [{"name": 5, "value": "x"}]),
        ("duplicate", [{"name": "D", "value": "1"}, {"name": "D", "value": "2"}]),
        ("invalid-name", [{"name": "1 bad=name", "value": "x"}]), ("empty-name", [{"name": "", "value": "x"}]),
        ("valueFrom-missing", [{"name": "S", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k"}}}]),
        ("valueFrom-and-value", [{"name": "S", "value": "x",
                                  "valueFrom": {"secretKeyRef": {"name": "a", "key": "b"}}}]),
        ("unknown-field", [{"name": "U", "value": "x", "bogus": True}]), ("null", [None]), ("string-item", ["A=B"])]],
    ("env:object", set_spec("env", {"A": "B"})),
    ("env:string", set_spec("env", "A=B")),
    # -- labels and annotations
    *[(f"podLabels:{label}", pod_labels(v)) for label, v in [
        ("instance", {"app.kubernetes.io/instance": "someone-else"}),
        ("managed-by", {"app.kubernetes.io/managed-by": "helm"}),
        ("component", {"app.kubernetes.io/component": "redis"}),
        ("name", {"app.kubernetes.io/name": "x"}), ("bad-value", {"a": "has spaces"}), ("long-value", {"a": LONG}),
        ("bad-key", {"not/a/key": "x"}), ("int-value", {"a": 1}), ("empty-key", {"": "x"})]],
    *[(f"podAnnotations:{label}", pod_annotations(v)) for label, v in [
        ("int-value", {"a": 1}), ("bad-key", {"///": "x"}), ("config-hash", {"gateway-operator.dev/config-hash": "x"}),
        ("secrets-revision", {"gateway-operator.dev/secrets-revision": "x"}), ("null-value", {"a": None})]],
    # -- conflicting idempotency forms
    *[(f"conflict:{form}", conflicting(form)) for form in (
        "hooks_idempotency-dict", "hooks_idempotency-str", "idempotency-top", "idempotency-top-dict", "hooks-list",
        "hooks-list-sqlite", "hooks-idempotency-backend-key", "turn_lock-memory", "push-other")],
    ("conflict:replicas3-sqlite", set_spec("replicas", 3)),
    ("replicas:redis-3", replicas_redis(3)),
    ("replicas:redis-100", replicas_redis(100)),
    ("replicas:redis-0", replicas_redis(0)),
    # -- health
    *[(f"health:{label}", set_spec("health", v)) for label, v in [
        ("timeout0", {"timeoutSeconds": 0}), ("timeout10000", {"timeoutSeconds": 10000}),
        ("timeout60", {"timeoutSeconds": 60}), ("interval0", {"intervalSeconds": 0}),
        ("interval3600", {"intervalSeconds": 3600}), ("interval-string", {"intervalSeconds": "1"}),
        ("interval-float", {"intervalSeconds": 0.001}), ("concurrency0", {"maxConcurrency": 0}),
        ("concurrency1000", {"maxConcurrency": 1000}), ("cooldown-negative", {"restartCooldownSeconds": -1}),
        ("cooldown-huge", {"restartCooldownSeconds": 10**18}), ("string", "fast"), ("null", None),
        ("restart-string", {"restartStaleReplicas": "no"})]],
    # -- persistence
    ("persistence:replicas3", persistence_many(False)),
    ("persistence:replicas3-redis", persistence_many(True)),
    *[(f"persistence:{label}", set_spec("persistence", v)) for label, v in [
        ("size-garbage", {"enabled": True, "size": "lots"}), ("size-negative", {"enabled": True, "size": "-1Gi"}),
        ("size-int", {"enabled": True, "size": 5}), ("class-unicode", {"enabled": True, "storageClassName": "ünï"}),
        ("enabled-string", {"enabled": "true"})]],
    # -- managed Redis
    ("managed:replicas3", managed(replicas=3)),
    ("managed:replicas1", managed()),
    ("managed:and-url", managed(keep_url=True)),
    ("managed:image-garbage", managed({"image": "NOT AN IMAGE"})),
    ("managed:resources-garbage", managed({"resources": {"limits": {"cpu": "lots"}}})),
    ("managed:enabled-string", redis_field(managed={"enabled": "yes"})),
    ("managed:disabled-only", lambda r, m, c: (use_redis_store(m),
                                               set_spec("redis", {"managed": {"enabled": False}})(r, m, c))),
    # -- Secrets
    ("authToken:missing-secret", secret_ref("authTokenSecretRef", {"name": "does-not-exist"})),
    ("authToken:not-utf8", secret_ref("authTokenSecretRef", {"name": SECRET_BINARY})),
    ("authToken:missing-key", secret_ref("authTokenSecretRef", {"name": SECRET_NOKEYS})),
    ("authToken:other-key", secret_ref("authTokenSecretRef", {"name": SECRET_TOKEN, "key": "nope"})),
    ("authToken:valid", secret_ref("authTokenSecretRef", {"name": SECRET_TOKEN})),
    ("authToken:empty-name", secret_ref("authTokenSecretRef", {"name": ""})),
    ("authToken:invalid-name", secret_ref("authTokenSecretRef", {"name": "Not/A Name"})),
    ("authToken:no-name", secret_ref("authTokenSecretRef", {"key": "token"})),
    ("authToken:string", secret_ref("authTokenSecretRef", "fuzz-token")),
    ("authToken:key-empty", secret_ref("authTokenSecretRef", {"name": SECRET_TOKEN, "key": ""})),
    ("authToken:key-invalid", secret_ref("authTokenSecretRef", {"name": SECRET_TOKEN, "key": "../../etc"})),
    ("password:missing-secret", secret_ref("", {"name": "does-not-exist"}, redis=True)),
    ("password:not-utf8", secret_ref("", {"name": SECRET_BINARY}, redis=True)),
    ("password:missing-key", secret_ref("", {"name": SECRET_NOKEYS}, redis=True)),
    ("password:wrong", secret_ref("", {"name": SECRET_TOKEN, "key": "token"}, redis=True)),
    ("password:none", redis_field(passwordSecretRef=None)),
    ("password:string", secret_ref("", "fuzz-redis-auth", redis=True)),
    # -- anything
    ("junk:random", random_junk),
    ("junk:random-2", random_junk),
    ("junk:random-3", random_junk),
]

BASES = ("sqlite", "redis", "warn")
SEP = " & "  # between the mutation labels of a case's kind


def _base(index: int, rng: random.Random, ctx_url: str) -> tuple[str, dict[str, Any]]:
    name = f"fz{index:04d}"
    base = rng.choice(BASES)
    if base == "sqlite":
        return base, gateway_deployment(name)
    if base == "redis":
        return base, gateway_deployment(name, replicas=rng.choice([1, 2, 3]), config=redis_store(),
                                        redis={"url": ctx_url, "passwordSecretRef": {"name": SECRET_REDIS}})
    return base, gateway_deployment(name, replicas=2, replicaPolicy="Warn")


def cases(seed: int, count: int, redis_url: str = DEFAULT_REDIS_URL) -> list[FuzzCase]:
    """``count`` cases, the same for the same arguments; a prefix of any longer run."""
    order = list(range(len(CATALOGUE)))
    random.Random(f"fuzz-order/{seed}").shuffle(order)
    out = []
    for i in range(count):
        rng = random.Random(f"fuzz-case/{seed}/{i}")
        base, manifest = _base(i, rng, redis_url)
        ctx = Ctx(index=i, redis_url=redis_url, base=base)
        picks = [order[i % len(order)]] + [rng.randrange(len(CATALOGUE)) for _ in range(rng.choice([0, 0, 1, 2]))]
        labels = [f"base:{base}"]
        for pick in picks:
            label, mutate = CATALOGUE[pick]
            mutate(rng, manifest, ctx)
            labels.append(label)
        out.append(FuzzCase(f"{seed}-{i:04d}", manifest, SEP.join(labels)))
    return out


def cases_for(seed: int, labels: Iterable[str], start: int, redis_url: str = DEFAULT_REDIS_URL) -> list[FuzzCase]:
    """One case per catalogue label (that mutation alone on a seeded base), numbered from
    ``start`` so that names never collide with ``cases(seed, start)``."""
    by_label = dict(CATALOGUE)
    out = []
    for i, label in enumerate(labels, start):
        rng = random.Random(f"fuzz-case/{seed}/{i}")
        base, manifest = _base(i, rng, redis_url)
        by_label[label](rng, manifest, Ctx(index=i, redis_url=redis_url, base=base))
        out.append(FuzzCase(f"{seed}-{i:04d}", manifest, SEP.join([f"base:{base}", label])))
    return out


def mutations_of(kind: str) -> list[str]:
    return [part for part in kind.split(SEP) if not part.startswith("base:")]


# == the runner ==========================================================================

API_PATH = "/apis/gateway-operator.dev/v1alpha1/namespaces/{ns}/gatewaydeployments?fieldValidation=Strict"
STATUS_JSONPATH = '{range .items[*]}{.metadata.name}{"\\t"}{.metadata.generation}{"\\t"}{.status}{"\\n"}{end}'


@dataclass
class CaseResult:
    id: str
    kind: str
    name: str
    batch: int
    outcome: str = "pending"   # refused | Ready | Stalled | WaitingForRedis | unsettled | gone | harness-error
    reason: str = ""           # Stalled reason, RedisReachable reason, or the refusal message
    detail: str = ""           # the condition's message; for unsettled ones what status said last
    seconds: float | None = None  # from create to settled
    step_failures: int = 0     # "step failed" tracebacks the operator logged for this object
    exception: str = ""        # the most frequent final exception line of those tracebacks


def settled_state(generation: int | None, status: dict[str, Any] | None) -> tuple[str, str, str] | None:
    """(outcome, reason, message) once the operator has observed this generation and said
    where it stands; None while it has not."""
    if not status or generation is None or status.get("observedGeneration") != generation:
        return None
    found = {c.get("type"): c for c in status.get("conditions") or [] if isinstance(c, dict)}
    ready, stalled = found.get("Ready") or {}, found.get("Stalled") or {}
    if ready.get("status") == "True":
        return "Ready", str(ready.get("reason") or ""), str(ready.get("message") or "")
    if stalled.get("status") == "True" and stalled.get("reason") and stalled.get("message"):
        return "Stalled", str(stalled["reason"]), str(stalled["message"])
    redis_reachable = found.get("RedisReachable") or {}
    if ready.get("status") == "False" and ready.get("reason") == "WaitingForRedis" and redis_reachable.get("reason"):
        return "WaitingForRedis", str(redis_reachable["reason"]), str(redis_reachable.get("message") or "")
    return None


def describe_status(generation: int | None, status: dict[str, Any] | None) -> str:
    if not status:
        return f"generation {generation}, no status"
    found = {c.get("type"): c for c in status.get("conditions") or [] if isinstance(c, dict)}
    parts = [f"generation {generation}, observedGeneration {status.get('observedGeneration')}"]
    for t in ("Ready", "Stalled", "Reconciling", "RedisReachable"):
        c = found.get(t)
        if c:
            parts.append(f"{t}={c.get('status')}/{c.get('reason')}: {str(c.get('message'))[:120]}")
    return "; ".join(parts)


def refusal_message(stderr: str, name: str) -> str:
    text = stderr.strip()
    text = re.sub(r"^Error from server \(\w+\): ", "", text)
    return text.replace('error when creating "STDIN": ', "").strip()


def refusal_keys(message: str, name: str) -> list[str]:
    """Short, value-free keys for counting refusal messages (one per reported error)."""
    text = message.replace(f'"{name}"', "<name>").replace(name, "<name>") if name else message
    text = re.sub(r"^The \w+ <name> is invalid: ", "", text)
    lines = [ln[2:] for ln in text.splitlines() if ln.startswith("* ")] or [text.splitlines()[0] if text else ""]
    keys = []
    for line in lines:
        if "some validation rules were not checked" in line:
            continue
        line = re.sub(r"Invalid value: (\"(?:[^\"\\]|\\.)*\"|\S+?): ", "Invalid value: <v>: ", line)
        line = re.sub(r"\d{5,}", "N", line)
        line = re.sub(r"\(\{.*", "(...)", line)
        keys.append(line[:150])
    return keys or [text[:150]]


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


STEP_FAILED_RE = re.compile(r"gateway (\S+?)/(\S+?): step failed")
REFUSED_RE = re.compile(r"gateway (\S+?)/(\S+?): the API server refused a request: (\d+) (.*)")
_CHAIN = ("The above exception was the direct cause", "During handling of the above exception")
_OBJECT_RE = re.compile(r"\b(fuzz-\d+-[0-9a-f]+|t-[0-9a-f]{8})/[^\s:,'\"\]]+")


_PREFIX_RE = re.compile(r"^(?:\[?\d{4}-\d\d-\d\d[ T][\d:.,]+\]?\s+)?(?:\[?(DEBUG|INFO|WARNING|ERROR|CRITICAL)\]?\s+)?")


def _split_record(line: str) -> tuple[str, str]:
    """(level or "", message) of a log record in the plain format, with or without a
    timestamp and level in front."""
    m = _PREFIX_RE.match(line)
    return (m.group(1) or "", line[m.end():]) if m else ("", line)


def _normal(line: str, limit: int = 160) -> str:
    line = _OBJECT_RE.sub("<ns>/<name>", line)
    line = re.sub(r"\[\d+/\w+/\d+:[\d:]+ [+-]\d+\]", "[<time>]", line)
    line = re.sub(r"\bfz\d{4}[^\s:,'\"]*", "<name>", line)
    return re.sub(r"\d{5,}", "N", line)[:limit]


def log_findings(lines: Iterable[str]) -> dict[str, Any]:
    """From the operator's log (streamed: a hot loop writes gigabytes): tracebacks by their
    final exception line (a chain counts once, by its last exception) and by the log record
    before them, the most frequent other messages, and per-object step failures."""
    exceptions: Counter[str] = Counter()
    contexts: Counter[str] = Counter()
    messages: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    step_failed: Counter[tuple[str, str]] = Counter()
    refused_kinds: Counter[str] = Counter()
    object_exceptions: dict[tuple[str, str], Counter[str]] = {}
    current_object: tuple[str, str] | None = None   # the object whose "step failed" the traceback follows
    tracebacks = 0
    in_traceback = False
    pending_final = ""   # an unindented line inside a traceback: the final one unless a chain follows
    last_record = ""
    for raw in lines:
        line = raw.rstrip("\n")
        if in_traceback:
            if not line.strip() or line.startswith((" ", "\t")):
                continue
            if line.startswith("Traceback (most recent call last)") or line.startswith(_CHAIN):
                pending_final = ""
                continue
            if pending_final:  # the previous unindented line ended the traceback
                exceptions[_normal(pending_final, 200)] += 1
                if current_object:
                    object_exceptions.setdefault(current_object, Counter())[_normal(pending_final, 200)] += 1
                in_traceback, pending_final = False, ""
            else:
                pending_final = line
                continue
        if line.startswith("Traceback (most recent call last)"):
            tracebacks += 1
            in_traceback, pending_final = True, ""
            contexts[_normal(last_record)] += 1
            m = STEP_FAILED_RE.search(last_record)
            current_object = (m.group(1), m.group(2)) if m else None
            continue
        if not line.strip() or line.startswith((" ", "\t")):
            continue
        level, message = _split_record(line)
        last_record = message
        m = STEP_FAILED_RE.search(message)
        if m:
            step_failed[(m.group(1), m.group(2))] += 1
        m = REFUSED_RE.search(message)
        if m:
            refused_kinds[f"{m.group(3)} {m.group(4).strip()[:60]}"] += 1
        if level in ("ERROR", "CRITICAL"):
            errors[_normal(message)] += 1
        if not message.startswith("applied "):
            messages[_normal(f"{level} {message}".strip())] += 1
    if in_traceback and pending_final:
        exceptions[_normal(pending_final, 200)] += 1
    return {"tracebacks": tracebacks, "object_exceptions": object_exceptions, "exceptions": exceptions,
            "contexts": contexts, "messages": messages, "errors": errors,
            "step_failed": step_failed, "api_refused_kinds": refused_kinds}


class OperatorWatch:
    """The operator under test: same pid, alive, peak RSS, logs across restarts."""

    def __init__(self, operator: Any, restart: Callable[[Any], Any] | None = None) -> None:
        self.operator = operator
        self._restart = restart
        self.first_pid = operator.proc.pid
        # what the log held before this run (a session-wide operator) is not this run's
        self.log_offset = Path(operator.log_path).stat().st_size
        self._scan = (Path(operator.log_path), self.log_offset)
        self.previous_logs: list[Path] = []  # copies of the logs of incarnations that died
        self.restarts: list[dict[str, Any]] = []
        self.peak_rss = 0.0
        self.rss_samples: list[tuple[float, float]] = []
        self._lock = threading.Lock()

    @property
    def pid(self) -> int:
        return self.operator.proc.pid

    def alive(self) -> bool:
        return self.operator.proc is not None and self.operator.proc.poll() is None

    def sample_rss(self, started: float) -> None:
        with self._lock:
            value = rss_mib(self.pid) if self.alive() else None
            if value is not None:
                self.peak_rss = max(self.peak_rss, value)
                self.rss_samples.append((round(time.monotonic() - started, 1), round(value, 1)))

    def liveness_ok(self) -> bool:
        import urllib.request
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.operator.liveness_port}/healthz", timeout=5):
                return True
        except OSError:
            return False

    def log_lines(self) -> Iterable[str]:
        """Every incarnation's log since the run began, streamed."""
        for n, path in enumerate([*self.previous_logs, self.operator.log_path]):
            with open(path, "rb") as f:
                if n == 0:
                    f.seek(self.log_offset)
                for line in f:
                    yield line.decode(errors="replace")

    def scan_new(self) -> dict[str, Any]:
        """What the log gained since the previous call: MiB, tracebacks, applied objects."""
        path = Path(self.operator.log_path)
        if self._scan[0] != path or path.stat().st_size < self._scan[1]:
            self._scan = (path, 0)
        size = tracebacks = applied = 0
        with open(path, "rb") as f:
            f.seek(self._scan[1])
            for line in f:
                if not line.endswith(b"\n"):
                    break
                size += len(line)
                tracebacks += line.startswith(b"Traceback (most recent call last)")
                applied += b" applied " in line[:60] or line.startswith(b"applied ")
        self._scan = (path, self._scan[1] + size)
        return {"log_mib": round(size / 2**20, 1), "tracebacks": tracebacks, "applied": applied}

    def log_bytes(self) -> int:
        paths = [*self.previous_logs, self.operator.log_path]
        return sum(Path(p).stat().st_size for p in paths) - self.log_offset

    def traceback_count(self) -> int:
        count = 0
        for line in self.log_lines():
            count += line.startswith("Traceback (most recent call last)")
        return count

    def handle_death(self, batch: int, kinds: list[str]) -> bool:
        """Record a dead operator; restart it when allowed. True when running again."""
        with self._lock:
            code = self.operator.proc.returncode if self.operator.proc else None
            self.restarts.append({"batch": batch, "pid": self.pid, "exit_code": code,
                                  "log_tail": self.operator.log_tail(40), "batch_kinds": kinds})
            if self._restart is None:
                return False
            self.scan_new()
            copy = Path(self.operator.log_path).with_name(f"operator.dead-{len(self.restarts)}.log")
            shutil.copyfile(self.operator.log_path, copy)  # a restart may reuse (truncate) the log
            self.previous_logs.append(copy)
            for attempt in range(3):
                try:
                    self.operator = self._restart(self.operator)
                    self._scan = (Path(self.operator.log_path), 0)
                    return True
                except RuntimeError as e:  # it died again while starting: a poisoned list?
                    self.restarts.append({"batch": batch, "pid": None, "exit_code": None,
                                          "log_tail": str(e)[-4000:], "batch_kinds": ["(restart failed)"]})
                    time.sleep(10)
            raise RuntimeError("the operator does not start any more; giving up")


class Bystander:
    """An untouched GatewayDeployment in its own namespace: every ``interval`` seconds its
    spec.podAnnotations counter is bumped and the time until status.observedGeneration
    reaches the new generation is one latency sample."""

    NAME = "bystander"

    def __init__(self, cluster: Any, interval: float = 2.0, timeout: float = 60.0) -> None:
        from kubernetes import client, config
        self.cluster, self.interval, self.timeout = cluster, interval, timeout
        self.api = client.CustomObjectsApi(config.new_client_from_config(str(cluster.kubeconfig)))
        self.namespace = ""
        self.samples: list[tuple[float, float]] = []   # (seconds since start, latency)
        self.timeouts = 0
        self.errors: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.started = 0.0

    def create(self, ready_timeout: float = 90.0) -> float:
        self.namespace = self.cluster.new_namespace()
        self.cluster.kubectl("create", "-n", self.namespace, "-f", "-",
                             input=json.dumps(gateway_deployment(self.NAME)))
        t0, last = time.monotonic(), {}

        def ready() -> bool:
            body = last["body"] = self._get()
            state = settled_state(body["metadata"].get("generation"), body.get("status")) if body else None
            return bool(state and state[:2] == ("Ready", "Available"))
        try:
            until(ready, timeout=ready_timeout, interval=0.3, what="the bystander Ready", tolerate=())
        except WaitTimeout:
            raise AssertionError("bystander never became Ready: "
                                 f"{describe_status(None, (last.get('body') or {}).get('status'))}") from None
        return time.monotonic() - t0

    def _get(self) -> dict[str, Any]:
        return self.api.get_namespaced_custom_object("gateway-operator.dev", "v1alpha1", self.namespace,
                                                     "gatewaydeployments", self.NAME)

    def start(self) -> None:
        self.started = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="fuzz-bystander", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(self.timeout + 10)

    def _loop(self) -> None:
        tick = 0
        while not self._stop.is_set():
            tick += 1
            began = time.monotonic()
            try:
                patched = self.api.patch_namespaced_custom_object(
                    "gateway-operator.dev", "v1alpha1", self.namespace, "gatewaydeployments", self.NAME,
                    {"spec": {"podAnnotations": {"fuzz.gateway-operator.dev/tick": str(tick)}}})
                generation = patched["metadata"]["generation"]
                while not self._stop.is_set():
                    observed = (self._get().get("status") or {}).get("observedGeneration")
                    if observed is not None and observed >= generation:
                        self.samples.append((round(began - self.started, 1), time.monotonic() - began))
                        break
                    if time.monotonic() - began > self.timeout:
                        self.timeouts += 1
                        self.samples.append((round(began - self.started, 1), time.monotonic() - began))
                        break
                    time.sleep(0.1)
            except Exception as e:  # an API hiccup is a data point, not the end of the run
                self.errors[f"{type(e).__name__}: {str(e).splitlines()[0][:100] if str(e) else ''}"] += 1
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - began)))

    def delete(self) -> None:
        if self.namespace:
            self.cluster.kubectl("delete", "namespace", self.namespace, "--wait=false", check=False)


@dataclass
class FuzzRun:
    cluster: Any
    watch: OperatorWatch
    redis_password: str
    batch_size: int = 25
    settle_timeout: float = 45.0     # per batch, from its last create
    poll_interval: float = 1.0
    progress: Callable[[str], None] = lambda _msg: None
    results: list[CaseResult] = field(default_factory=list)
    harness_errors: list[str] = field(default_factory=list)
    liveness_failures: int = 0
    batch_seconds: list[float] = field(default_factory=list)
    timeline: list[dict[str, Any]] = field(default_factory=list)  # one entry per batch
    stopped: bool = False  # the operator died and may not be restarted
    bystander: Bystander | None = None

    def run(self, all_cases: list[FuzzCase], seed: int | None = None) -> dict[str, Any]:
        started = time.monotonic()
        bystander = self.bystander = Bystander(self.cluster)
        bystander_ready = bystander.create()
        stop_rss = threading.Event()

        def sample() -> None:
            while not stop_rss.is_set():
                self.watch.sample_rss(started)
                stop_rss.wait(0.5)
        sampler = threading.Thread(target=sample, name="fuzz-rss", daemon=True)
        sampler.start()
        bystander.start()
        try:
            for b in range(0, len(all_cases), self.batch_size):
                if self.stopped:
                    self.progress("the operator is dead and may not be restarted: stopping early")
                    break
                self._batch(b // self.batch_size, all_cases[b:b + self.batch_size])
        finally:
            bystander.stop()
            stop_rss.set()
            sampler.join(5)
            bystander.delete()
        return self.summary(seed, time.monotonic() - started, bystander, bystander_ready)

    # -- one batch
    def _kubectl(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str] | None:
        """kubectl for the harness's own housekeeping: a failure is recorded, never raised."""
        try:
            proc = self.cluster.kubectl(*args, input=input, check=False)
        except subprocess.TimeoutExpired:
            self.harness_errors.append(f"kubectl {' '.join(args)[:120]} timed out")
            return None
        if proc.returncode != 0:
            self.harness_errors.append(f"kubectl {' '.join(args)[:120]} failed: {proc.stderr.strip()[:200]}")
        return proc

    def _batch(self, number: int, batch: list[FuzzCase]) -> None:
        t0 = time.monotonic()
        ns = f"fuzz-{number:03d}-{uuid.uuid4().hex[:5]}"
        self.cluster.kubectl("create", "namespace", ns)
        self._fixture_secrets(ns)
        results: dict[str, CaseResult] = {}
        created_at: dict[str, float] = {}
        finalized: list[str] = []
        for case in batch:
            name = str((case.manifest.get("metadata") or {}).get("name", ""))
            result = CaseResult(case.id, case.kind, name, number)
            self.results.append(result)
            try:
                proc = self.cluster.kubectl("create", "--raw", API_PATH.format(ns=ns), "-f", "-",
                                            input=to_json(case.manifest), check=False)
            except subprocess.TimeoutExpired:
                result.outcome, result.detail = "harness-error", "kubectl create timed out"
                continue
            if proc.returncode != 0:
                result.outcome, result.reason = "refused", refusal_message(proc.stderr, name)
                if "Error from server" not in proc.stderr and not re.match(r"The \w+ \".*\" is invalid", proc.stderr):
                    result.detail = "refused by kubectl, not the API server"
            else:
                results[name] = result
                created_at[name] = time.monotonic()
                if (case.manifest.get("metadata") or {}).get("finalizers"):
                    finalized.append(name)
        last_create = time.monotonic()
        dead = False
        missing: dict[str, int] = {}
        while results:
            remaining = [n for n, r in results.items() if r.outcome == "pending"]
            if not remaining:
                break
            if not self.watch.alive():
                dead = True
                break
            try:
                statuses, listed = self._statuses(ns), True
            except Exception as e:  # noqa: BLE001 - report, keep going
                self.harness_errors.append(f"batch {number}: reading status failed: {str(e)[:200]}")
                statuses, listed = {}, False
            for name in remaining:
                if listed and name not in statuses:  # deleted by someone else (the garbage collector)
                    missing[name] = missing.get(name, 0) + 1
                    if missing[name] >= 3:
                        results[name].outcome = "gone"
                        results[name].detail = ("the object disappeared (e.g. garbage-collected through a "
                                                "bogus ownerReference)")
                    continue
                generation, status = statuses.get(name, (None, None))
                state = settled_state(generation, status)
                if state:
                    r = results[name]
                    r.outcome, r.reason, message = state
                    r.detail = message[:300]
                    r.seconds = round(time.monotonic() - created_at[name], 1)
            if time.monotonic() - last_create > self.settle_timeout:
                for name in remaining:
                    r = results[name]
                    if r.outcome == "pending":
                        generation, status = statuses.get(name, (None, None))
                        r.outcome, r.detail = "unsettled", describe_status(generation, status)
                break
            time.sleep(self.poll_interval)
        if dead:
            for r in results.values():
                if r.outcome == "pending":
                    r.outcome, r.detail = "unsettled", "the operator died during this batch"
        alive = self.watch.alive()
        if alive and not self.watch.liveness_ok():
            self.liveness_failures += 1
        # finalizers nobody serves (a case's own) would keep the namespace Terminating forever
        for name in finalized:
            self._kubectl("patch", "-n", ns, "gatewaydeployment", name, "--type=merge",
                          "-p", '{"metadata":{"finalizers":null}}')
        self._kubectl("delete", "namespace", ns, "--wait=false")
        log = self.watch.scan_new()
        exit_code = None
        if not alive:
            exit_code = self.watch.operator.proc.returncode
            self.progress(f"batch {number}: operator died (exit {exit_code}); waiting for the batch "
                          "namespace to go before a restart")
            self._wait_namespace_gone(ns, 120)
            if not self.watch.handle_death(number, [c.kind for c in batch]):
                self.stopped = True
        counts = Counter(r.outcome for r in self.results if r.batch == number)
        seconds = round(time.monotonic() - t0, 1)
        in_batch = [lat for at, lat in (self.bystander.samples if self.bystander else [])
                    if t0 - self.bystander.started <= at < time.monotonic() - self.bystander.started]
        self.batch_seconds.append(seconds)
        self.timeline.append({"batch": number, "namespace": ns, "seconds": seconds, "outcomes": dict(counts),
                              "operator_died": not alive, "exit_code": exit_code,
                              "bystander_max": _round(max(in_batch)) if in_batch else None, **log})
        self.progress(f"batch {number}: {dict(counts)} in {seconds:.0f}s; operator log +{log['log_mib']} MiB, "
                      f"+{log['tracebacks']} tracebacks; rss peak {self.watch.peak_rss:.0f} MiB")

    def _wait_namespace_gone(self, ns: str, timeout: float) -> None:
        def gone() -> bool:
            proc = self._kubectl("get", "namespace", ns, "--ignore-not-found", "-o", "name")
            return proc is not None and proc.returncode == 0 and not proc.stdout.strip()
        try:
            until(gone, timeout=timeout, interval=1, what=f"namespace {ns} gone", tolerate=())
        except WaitTimeout:
            self.harness_errors.append(f"namespace {ns} still there after {timeout:.0f}s")

    def _fixture_secrets(self, ns: str) -> None:
        def secret(name: str, data: dict[str, bytes]) -> dict[str, Any]:
            return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
                    "data": {k: base64.b64encode(v).decode() for k, v in data.items()}}
        items = [secret(SECRET_REDIS, {"password": self.redis_password.encode()}),
                 secret(SECRET_TOKEN, {"token": b"fuzz-token-" + b"t" * 40}),
                 secret(SECRET_BINARY, {"password": NOT_UTF8, "token": NOT_UTF8}),
                 secret(SECRET_NOKEYS, {"other": b"x"})]
        self.cluster.kubectl("create", "-n", ns, "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                                               "items": items}))

    def _statuses(self, ns: str) -> dict[str, tuple[int | None, dict[str, Any] | None]]:
        """name -> (generation, status), through kubectl's jsonpath so that configs nested
        deeper than Python's json module goes are never parsed here."""
        out = self.cluster.kubectl("get", "gatewaydeployments", "-n", ns, "-o", f"jsonpath={STATUS_JSONPATH}").stdout
        found: dict[str, tuple[int | None, dict[str, Any] | None]] = {}
        for line in out.splitlines():
            parts = line.split("\t", 2)
            if len(parts) < 2:
                continue
            status = json.loads(parts[2]) if len(parts) == 3 and parts[2].strip() else None
            found[parts[0]] = (int(parts[1]) if parts[1].isdigit() else None, status)
        return found

    # -- the summary
    def summary(self, seed: int | None, seconds: float, bystander: Bystander, bystander_ready: float) -> dict[str, Any]:
        findings = log_findings(self.watch.log_lines())
        by_name_ns = {}
        for r in self.results:
            by_name_ns[r.name] = r
        for (_ns, name), n in findings["step_failed"].items():
            if name in by_name_ns:
                by_name_ns[name].step_failures += n
        for (_ns, name), counter in findings["object_exceptions"].items():
            if name in by_name_ns:
                by_name_ns[name].exception = counter.most_common(1)[0][0]
        outcome = Counter(r.outcome for r in self.results)
        refused = [r for r in self.results if r.outcome == "refused"]
        refusal_counts: Counter[str] = Counter()
        for r in refused:
            refusal_counts.update(refusal_keys(r.reason, r.name))
        stalled = Counter(r.reason for r in self.results if r.outcome == "Stalled")
        waiting = Counter(r.reason for r in self.results if r.outcome == "WaitingForRedis")
        by_mutation: dict[str, Counter[str]] = {}
        for r in self.results:
            label = r.outcome if r.outcome != "Stalled" else f"Stalled:{r.reason}"
            for m in mutations_of(r.kind):
                by_mutation.setdefault(m.split(":")[0], Counter())[label] += 1
        latencies = [lat for _, lat in bystander.samples]
        settle_times = [r.seconds for r in self.results if r.seconds is not None]
        return {
            "seed": seed,
            "cases": len(self.results),
            "batches": len(self.batch_seconds),
            "seconds": round(seconds, 1),
            "refused": len(refused),
            "refused_without_message": [r.id for r in refused if not r.reason.strip()],
            "refused_by_client": [r.id for r in refused if r.detail],
            "top_refusals": refusal_counts.most_common(25),
            "accepted": len(self.results) - len(refused) - outcome["harness-error"],
            "gone": [(r.id, r.kind) for r in self.results if r.outcome == "gone"],
            "ready": outcome["Ready"],
            "stalled": outcome["Stalled"],
            "stalled_by_reason": dict(stalled.most_common()),
            "stalled_examples": {reason: [(r.id, r.kind, r.detail[:200]) for r in self.results
                                          if r.outcome == "Stalled" and r.reason == reason][:3] for reason in stalled},
            "waiting_for_redis": outcome["WaitingForRedis"],
            "waiting_for_redis_by_reason": dict(waiting.most_common()),
            "unsettled": [{"id": r.id, "kind": r.kind, "name": r.name[:80], "batch": r.batch, "detail": r.detail}
                          for r in self.results if r.outcome == "unsettled"],
            "harness_errors": self.harness_errors + [f"{r.id}: {r.detail}" for r in self.results
                                                     if r.outcome == "harness-error"],
            "settle_seconds_p50": percentile(settle_times, 0.5),
            "settle_seconds_max": max(settle_times) if settle_times else None,
            "operator_first_pid": self.watch.first_pid,
            "operator_pid": self.watch.pid,
            "operator_alive": self.watch.alive(),
            "operator_restarts": len(self.watch.restarts),
            "restarts": self.watch.restarts,
            "liveness_failures": self.liveness_failures,
            "tracebacks": findings["tracebacks"],
            "traceback_exceptions": findings["exceptions"].most_common(20),
            "traceback_contexts": findings["contexts"].most_common(10),
            "operator_messages": findings["messages"].most_common(20),
            "operator_error_lines": sum(findings["errors"].values()),
            "operator_errors": findings["errors"].most_common(15),
            "api_refused_kinds": findings["api_refused_kinds"].most_common(10),
            "step_failures_by_kind": Counter(m for r in self.results if r.step_failures
                                             for m in mutations_of(r.kind)).most_common(30),
            "operator_log_mib": round(self.watch.log_bytes() / 2**20, 1),
            "objects_whose_step_raised": [
                (r.id, r.kind, r.step_failures, r.exception, r.outcome)
                for r in sorted(self.results, key=lambda r: -r.step_failures) if r.step_failures],
            "peak_rss_mib": round(self.watch.peak_rss, 1),
            "rss_samples": self.watch.rss_samples[:: max(1, len(self.watch.rss_samples) // 60)],
            "bystander": {
                "ready_seconds": round(bystander_ready, 1),
                "samples": len(latencies),
                "p50": _round(percentile(latencies, 0.5)),
                "p95": _round(percentile(latencies, 0.95)),
                "max": _round(max(latencies) if latencies else None),
                "timeouts": bystander.timeouts,
                "errors": dict(bystander.errors),
                "slowest": sorted(bystander.samples, key=lambda s: -s[1])[:5],
            },
            "batch_seconds": self.batch_seconds,
            "timeline": self.timeline,
            "by_mutation_family": {k: dict(v) for k, v in sorted(by_mutation.items())},
            "results": [r.__dict__ for r in self.results],
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


@dataclass(frozen=True)
class Bounds:
    peak_rss_mib: float = 250.0
    bystander_max_seconds: float = 15.0


def failures(summary: dict[str, Any], bounds: Bounds = Bounds()) -> list[str]:
    """What the issue calls a failure, as readable lines (empty: the run passed)."""
    out = []
    if summary["unsettled"]:
        out.append(f"{len(summary['unsettled'])} accepted cases never settled: "
                   + ", ".join(f"{u['id']} ({u['kind']})" for u in summary["unsettled"][:10]))
    if summary["refused_without_message"]:
        out.append(f"refused without a message: {summary['refused_without_message']}")
    if summary["harness_errors"]:
        out.append(f"harness errors: {summary['harness_errors'][:5]}")
    if summary["operator_restarts"] or not summary["operator_alive"] or \
            summary["operator_pid"] != summary["operator_first_pid"]:
        out.append(f"operator died {summary['operator_restarts']} times (exit codes "
                   f"{[r['exit_code'] for r in summary['restarts']]})")
    if summary["tracebacks"]:
        out.append(f"{summary['tracebacks']} tracebacks in the operator log: "
                   + "; ".join(f"{n}x {e}" for e, n in summary["traceback_exceptions"][:5]))
    if summary["liveness_failures"]:
        out.append(f"operator liveness failed after {summary['liveness_failures']} batches")
    if summary["peak_rss_mib"] > bounds.peak_rss_mib:
        out.append(f"operator peak RSS {summary['peak_rss_mib']} MiB > {bounds.peak_rss_mib} MiB")
    b = summary["bystander"]
    if not b["samples"]:
        out.append("no bystander latency sample")
    elif b["max"] is not None and b["max"] > bounds.bystander_max_seconds:
        out.append(f"bystander latency max {b['max']} s > {bounds.bystander_max_seconds} s "
                   f"({b['timeouts']} timeouts)")
    return out


def table(summary: dict[str, Any]) -> str:
    """The printed summary."""
    b = summary["bystander"]
    rows = [
        ("seed", summary["seed"]), ("cases", summary["cases"]), ("batches", summary["batches"]),
        ("run time", f"{summary['seconds']} s"),
        ("refused at admission", summary["refused"]),
        ("  without a message", len(summary["refused_without_message"])),
        ("accepted", summary["accepted"]), ("  Ready", summary["ready"]),
        ("  Stalled", summary["stalled"]),
        *[(f"    {reason}", n) for reason, n in summary["stalled_by_reason"].items()],
        ("  WaitingForRedis", summary["waiting_for_redis"]),
        *[(f"    {reason}", n) for reason, n in summary["waiting_for_redis_by_reason"].items()],
        ("  unsettled", len(summary["unsettled"])),
        ("  gone (deleted by others)", len(summary["gone"])),
        ("settle time p50/max", f"{summary['settle_seconds_p50']} / {summary['settle_seconds_max']} s"),
        ("harness errors", len(summary["harness_errors"])),
        ("operator restarts", summary["operator_restarts"]),
        ("operator liveness failures", summary["liveness_failures"]),
        ("tracebacks in operator log", summary["tracebacks"]),
        ("ERROR lines in operator log", summary["operator_error_lines"]),
        ("operator log written", f"{summary['operator_log_mib']} MiB"),
        ("peak operator RSS", f"{summary['peak_rss_mib']} MiB"),
        ("bystander latency p50/p95/max", f"{b['p50']} / {b['p95']} / {b['max']} s "
                                          f"({b['samples']} samples, {b['timeouts']} timeouts)"),
    ]
    width = max(len(k) for k, _ in rows)
    lines = [f"{k.ljust(width)}  {v}" for k, v in rows]
    if summary["top_refusals"]:
        lines.append("top refusal messages:")
        lines += [f"  {n:4d}  {msg}" for msg, n in summary["top_refusals"][:12]]
    if summary["stalled_examples"]:
        lines.append("Stalled, examples:")
        for reason, examples in summary["stalled_examples"].items():
            lines += [f"  {reason}: {i} [{kind}] {msg[:140]}" for i, kind, msg in examples[:2]]
    if summary["unsettled"]:
        lines.append("unsettled:")
        lines += [f"  {u['id']} [{u['kind']}] {u['detail'][:200]}" for u in summary["unsettled"][:40]]
    if summary["operator_errors"]:
        lines.append("operator ERROR lines, most frequent:")
        lines += [f"  {n:4d}  {e[:150]}" for e, n in summary["operator_errors"][:8]]
    if summary["traceback_exceptions"]:
        lines.append("tracebacks (final exception line):")
        lines += [f"  {n:4d}  {e}" for e, n in summary["traceback_exceptions"][:12]]
    if summary["objects_whose_step_raised"]:
        lines.append("objects whose reconcile step raised (times, last exception):")
        lines += [f"  {i} [{kind}] {n}x {exc[:150]}"
                  for i, kind, n, exc, _ in summary["objects_whose_step_raised"][:40]]
    deaths: dict[str, list[Any]] = {}
    for r in summary["restarts"]:
        tail = [ln for ln in r["log_tail"].splitlines() if ln.strip()]
        deaths.setdefault(tail[-1] if tail else "(empty log)", []).append(r)
    for final, group in deaths.items():
        lines.append(f"operator died {len(group)}x (batches {[r['batch'] for r in group]}, exit codes "
                     f"{sorted({str(r['exit_code']) for r in group})}): {final[:200]}")
        frames = [ln for ln in group[0]["log_tail"].splitlines() if ln.strip() and set(ln.strip()) != {"^"}]
        lines += [f"  | {ln[:160]}" for ln in frames[-7:-1]]
    calm = [t["bystander_max"] for t in summary["timeline"]
            if not t["operator_died"] and t["bystander_max"] is not None]
    if calm:
        lines.append(f"bystander latency max in batches without an operator death: {max(calm)} s")
    return "\n".join(lines)


def run_cases(cluster: Any, watch: OperatorWatch, redis_password: str, all_cases: Iterable[FuzzCase],
              seed: int | None = None, **settings: Any) -> dict[str, Any]:
    return FuzzRun(cluster, watch, redis_password, **settings).run(list(all_cases), seed)
