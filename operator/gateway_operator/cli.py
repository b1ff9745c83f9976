"""``gateway-operator``: run the operator, or work offline on GatewayDeployment files.

    gateway-operator run [--namespace NS ...] [--metrics-port P] [--liveness-port P] [--log-format F]
    gateway-operator render -f gatewaydeployment.yaml   # the objects it would produce
    gateway-operator check -f gatewaydeployment.yaml    # the CRD's rules, offline
    gateway-operator crd                                # the CustomResourceDefinition
    gateway-operator version [--output json]            # the release and the gateway releases tested
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

import yaml

from gateway_operator import __version__, api


class InputError(Exception):
    """A file that cannot be read as GatewayDeployments: one line, no traceback."""


def _documents(paths: Sequence[str]) -> list[tuple[str, dict[str, Any]]]:
    """Every GatewayDeployment in the files named by -f (repeatable; - is stdin)."""
    found = []
    for path in _expand(paths):
        try:
            text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
            docs = list(yaml.safe_load_all(text))
        except OSError as e:
            raise InputError(f"{path}: {e.strerror or e}") from None
        except UnicodeDecodeError:
            raise InputError(f"{path}: not UTF-8 text") from None
        except yaml.YAMLError as e:
            raise InputError(f"{path}: not valid YAML: {str(e).splitlines()[0]}") from None
        except RecursionError:
            raise InputError(f"{path}: nests too deeply to read") from None
        found += [(path, d) for d in docs if isinstance(d, dict) and d.get("kind") == api.KIND]
    if not found:
        raise InputError(f"{', '.join(paths)}: no {api.KIND} found")
    return found


def _expand(paths: Sequence[str]) -> list[str]:
    """A directory stands for its YAML and JSON files (not recursive), in name order."""
    expanded = []
    for path in paths:
        if path != "-" and Path(path).is_dir():
            expanded += sorted(str(p) for p in Path(path).iterdir() if p.suffix in (".yaml", ".yml", ".json"))
        else:
            expanded.append(path)
    return expanded


def cmd_crd(_: argparse.Namespace) -> int:
    from gateway_operator.api.crd import crd
    sys.stdout.write(yaml.safe_dump(crd(), sort_keys=False, width=100))
    return 0


def operator_version() -> str:
    """The installed distribution's version; this code's own (``__version__``) when it runs
    without being installed (a checkout on PYTHONPATH)."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("gateway-operator")
    except PackageNotFoundError:
        return __version__


def cmd_version(args: argparse.Namespace) -> int:
    """The operator's release, its chart's (one version: the image ships no chart, so it is the
    constant the chart is tied to) and the praisonai-bot releases it was tested with."""
    from gateway_operator.core.compat import TESTED_RELEASES
    found = {"operator": operator_version(), "chart": __version__,
             "testedGatewayReleases": {"praisonai-bot": list(TESTED_RELEASES)}}
    if args.output == "json":
        print(json.dumps(found, indent=2))
    else:
        print(f"gateway-operator {found['operator']}")
        print(f"chart gateway-operator {found['chart']}")
        print(f"tested with praisonai-bot {', '.join(TESTED_RELEASES)}")
    return 0


def cmd_redis_acl(args: argparse.Namespace) -> int:
    """The least-privilege ACL user for one GatewayDeployment on a Redis of your own."""
    from gateway_operator.api.redis_acl import rules
    prefix = args.prefix or api.default_prefix(args.namespace, args.name)
    print(f"ACL SETUSER {args.user} {rules(prefix, args.db, args.password)}")
    return 0


def cmd_tenancy_policy(_: argparse.Namespace) -> int:
    from gateway_operator.api.crd import tenancy_policy_template
    sys.stdout.write(tenancy_policy_template())
    return 0


def _print_refusal(doc: dict[str, Any], errors: Sequence[str]) -> None:
    name = (doc.get("metadata") or {}).get("name", "?")
    print(f'The {api.KIND} "{name}" is invalid:', file=sys.stderr)
    for error in errors:
        print(f"* {error}", file=sys.stderr)


def _tenancy_policy(paths: Sequence[str] | None) -> Any:
    """The chart's tenancy policy: its defaults, or the ``tenancy`` of the chart values files given
    (helm's -f: later files win, maps merged key by key)."""
    from gateway_operator.api.tenancy import TenancyPolicy
    merged: dict[str, Any] = {}
    for path in paths or ():
        try:
            values = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        except OSError as e:
            raise InputError(f"{path}: {e.strerror or e}") from None
        except (UnicodeDecodeError, yaml.YAMLError):
            raise InputError(f"{path}: not a YAML values file") from None
        if not isinstance(values, dict):
            raise InputError(f"{path}: not a YAML values file (a mapping)")
        merged = _merge(merged, values)
    try:
        return TenancyPolicy.parse(merged.get("tenancy"))
    except (ValueError, TypeError, AttributeError) as e:
        raise InputError(f"--values: tenancy: {e}") from None


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        merged[key] = _merge(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict) \
            else value
    return merged


def cmd_check(args: argparse.Namespace) -> int:
    from gateway_operator.api.validation import warnings
    from gateway_operator.offline import check
    policy = _tenancy_policy(args.values)
    failed = 0
    for _, doc in _documents(args.file):
        errors = check(doc, policy, args.namespace)
        if errors:
            failed += 1
            _print_refusal(doc, errors)
            continue
        for warning in warnings(doc.get("spec") or {}):  # what kubectl apply prints under Warn
            print(f"Warning: {warning}", file=sys.stderr)
        print(f"{api.KIND} {(doc.get('metadata') or {}).get('name', '?')!r}: valid")
    return 1 if failed else 0


def cmd_render(args: argparse.Namespace) -> int:
    """Renders nothing unless every document passes ``check`` (same messages)."""
    from gateway_operator.core.render.names import OperatorIdentity
    from gateway_operator.offline import Refused, render_objects
    operator = OperatorIdentity(args.operator_namespace, args.operator_instance, args.managed_redis_image)
    policy = _tenancy_policy(args.values)
    rendered, failed = [], 0
    for _, doc in _documents(args.file):
        try:
            rendered.append(render_objects(doc, args.namespace, operator, policy))
        except Refused as e:
            failed += 1
            _print_refusal(doc, e.errors)
    if failed:
        return 1
    for objects in rendered:
        sys.stdout.write(yaml.dump_all(objects, Dumper=_BlockDumper, sort_keys=False))
        sys.stdout.write("---\n")
    return 0


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings (gateway.yaml, the launcher) as YAML block literals: reviewable in a
    GitOps diff."""


_BlockDumper.add_representer(str, lambda dumper, value: dumper.represent_scalar(
    "tag:yaml.org,2002:str", value, style="|" if "\n" in value else None))

PLAIN_FORMAT = "%(asctime)s %(levelname)s %(message)s"


class _QuietHandlerSuccess(logging.Filter):
    """kopf logs every watch-event handler call at INFO; those say nothing to a reader."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno == logging.INFO and record.getMessage().startswith("Handler ")
                    and record.getMessage().endswith("succeeded."))


class _QuietGoneNamespace(logging.Filter):
    """kopf's Event posting into a namespace that is gone (404) or being deleted (403,
    NamespaceTerminating) fails, is retried and logged at WARNING and ERROR: expected while a
    tenant deletes its namespace, so at DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if record.levelno >= logging.WARNING and ("being terminated" in text or (
                'namespaces "' in text and "not found" in text)):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


def _few_malloc_arenas() -> None:
    """glibc gives each thread that allocates its own malloc arena (up to 8 per core), and what
    the 16 API threads free there is seldom returned: two arenas, as MALLOC_ARENA_MAX=2 would
    set, cut the settled RSS at 300 x 3 from 178 to 170 MiB and the start-up peak from 182 to
    159 MiB (bench/operator_bench.py). Before any thread starts; a no-op off glibc."""
    import ctypes
    import ctypes.util
    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt(-8, 2)  # M_ARENA_MAX
    except (OSError, AttributeError):
        pass


def cmd_run(args: argparse.Namespace) -> int:
    _few_malloc_arenas()
    if args.kubeconfig:  # kopf's login reads the standard variable, at import time
        os.environ["KUBECONFIG"] = args.kubeconfig
    import kopf

    from gateway_operator.core.render.names import OperatorIdentity
    from gateway_operator.core.schedule import Timing
    from gateway_operator.core.settings import ControllerSettings, ReconcileSettings
    from gateway_operator.loop import handlers  # noqa: F401  (registers the kopf handlers)
    from gateway_operator.pod import pod_code

    # The watch stream is decoded by json, which recurses per nesting level; the API server
    # admits objects nested up to 10,000 levels. Decoding such an object must not kill the
    # watch for every namespace: the operator then refuses it (ConfigOverLimits) alone.
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 25_000))
    threading.stack_size(64 * 1024 * 1024)  # threads that may meet such an object get a deep stack

    # every format carries a timestamp and a level (kopf's plain format has neither)
    log_format: Any = PLAIN_FORMAT if args.log_format == "plain" else kopf.LogFormat[args.log_format.upper()]
    kopf.configure(verbose=args.verbose, log_format=log_format)
    logging.getLogger().setLevel("DEBUG" if args.verbose else args.log_level.upper())
    logging.getLogger("kopf.objects").addFilter(_QuietHandlerSuccess())
    logging.getLogger("kopf._core.engines.posting").addFilter(_QuietGoneNamespace())
    # the kubelet's /healthz probes every few seconds are access lines: only with --verbose
    logging.getLogger("aiohttp.access").setLevel(logging.DEBUG if args.verbose else logging.WARNING)
    if args.metrics_port:
        from gateway_operator.loop import metrics
        metrics.serve(args.metrics_port, args.bind_address)
    reconcile_settings = ReconcileSettings(timing=Timing(resync_seconds=args.resync_seconds), operator=OperatorIdentity(
        args.operator_namespace, args.operator_instance, args.managed_redis_image),
        pod_code=pod_code())  # the pods' code, read once here: the render takes it as an input
    from gateway_operator.api.tenancy import TenancyPolicy
    try:
        tenancy = TenancyPolicy.from_json(args.tenancy_policy)
    except (ValueError, TypeError, AttributeError) as e:
        raise InputError(f"--tenancy-policy: {e}") from None
    reconcile_settings = replace(reconcile_settings, tenancy=tenancy)
    memo = kopf.Memo(kubeconfig=args.kubeconfig, controller_settings=ControllerSettings(
        reconcile=reconcile_settings, redis_allow=tuple(args.redis_allow or ()),
        max_concurrent_rollouts=args.max_concurrent_rollouts, health_watch=not args.no_health_watch))
    if not args.redis_allow:
        logging.getLogger(__name__).warning(
            "the Redis probe may connect to any host:port a GatewayDeployment names (no --redis-allow)")
    election = None
    if args.shards:
        if args.leader_election:
            raise InputError("--shards and --leader-election exclude each other: with shards every replica works")
        from gateway_operator.core import shards
        from gateway_operator.core.settings import ShardSettings
        from gateway_operator.loop.leader import default_identity
        if not 1 <= args.shards <= shards.MAX_SHARDS:
            raise InputError(f"--shards: 1..{shards.MAX_SHARDS}, or 0 for off")
        try:
            timing = shards.Timing(args.lease_duration, args.renew_deadline, args.retry_period)
        except ValueError as e:
            raise InputError(f"--lease-duration, --renew-deadline, --retry-period: {e}") from None
        if timing.lease_duration - timing.renew_deadline < shards.MIN_MARGIN:
            raise InputError(f"--shards needs --lease-duration at least {shards.MIN_MARGIN:g} s above --renew-deadline "
                             f"(got {timing.lease_duration:g} and {timing.renew_deadline:g}): the operator's writes "
                             "are bounded by that margin, so that one sent just before a lost shard's deadline lands "
                             "before another replica may take the shard")
        # unique per process: a restarted container must not inherit the Leases its predecessor held
        memo.sharding = ShardSettings(args.shards, f"{args.leader_identity or default_identity()}-"
                                      f"{secrets.token_hex(3)}", args.operator_namespace,
                                      args.operator_instance, timing)
    if args.leader_election:
        from gateway_operator.clients.kube import load_config
        from gateway_operator.loop.leader import ElectionSettings, default_identity, wait_for_leadership
        load_config(args.kubeconfig)  # the elector's client
        election = ElectionSettings(
            f"{args.operator_instance}-leader", args.operator_namespace, args.leader_identity or default_identity(),
            args.lease_duration, args.renew_deadline, args.retry_period)
        wait_for_leadership(election, (args.bind_address, args.liveness_port) if args.liveness_port else None)
    memo.watch_secrets = not args.no_watch_secrets
    if memo.watch_secrets:
        handlers.watch_secrets()
    memo.watch_check = handlers.WatchCheck(args.watch_check_seconds, args.watch_stall_seconds,
                                           tuple(args.namespace or ()), election)
    liveness = f"http://{args.bind_address}:{args.liveness_port}/healthz" if args.liveness_port else None
    # uvloop (libuv): the same asyncio API at about 40% less CPU per /health poll, and every
    # watch, probe and thread hand-off runs on it too (docs/development.md, "Polling")
    import uvloop
    kopf.run(standalone=True, namespaces=args.namespace or [], clusterwide=not args.namespace,
             liveness_endpoint=liveness, memo=memo, loop=uvloop.new_event_loop())
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gateway-operator", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the operator")
    run.add_argument("--namespace", "-n", action="append",
                     help="watch only this namespace (repeatable); default: all namespaces")
    run.add_argument("--kubeconfig", help="kubeconfig path (default: in-cluster, then ~/.kube/config)")
    run.add_argument("--metrics-port", type=int, default=8080, help="Prometheus /metrics port (0: off)")
    run.add_argument("--liveness-port", type=int, default=8081, help="liveness /healthz port (0: off)")
    run.add_argument("--max-concurrent-rollouts", type=int, default=2,
                     help="GatewayDeployments rolling at a time for a change of the operator's own (a new launcher "
                          "or default), not of their spec; 0: no cap")
    run.add_argument("--watch-check-seconds", type=float, default=60.0,
                     help="list the watched objects this often to find a stalled watch (0: off)")
    run.add_argument("--watch-stall-seconds", type=float, default=90.0,
                     help="a listed change the watch has not delivered for this long: give up the Lease and exit")
    run.add_argument("--bind-address", default="0.0.0.0", help="address of the metrics and liveness servers")
    run.add_argument("--log-format", choices=["plain", "full", "json"], default="full")
    run.add_argument("--log-level", choices=["debug", "info", "warning", "error"], default="info")
    run.add_argument("--resync-seconds", type=float, default=60.0, help="full reconcile at least this often")
    run.add_argument("--no-watch-secrets", action="store_true",
                     help="do not list and watch Secrets (RBAC of get and create only): each full pass "
                          "then reads the Secrets it uses, and a generated one is read before it is created")
    run.add_argument("--no-health-watch", action="store_true",
                     help="poll every replica's GET /health only (no long-poll health watch on port 8766)")
    run.add_argument("--redis-allow", action="append", metavar="CIDR|HOST|.DOMAIN",
                     help="where the Redis probe may connect (repeatable); default: anywhere")
    run.add_argument("--tenancy-policy", metavar="JSON", default="",
                     help="the administrator's tenancy policy, as the chart's tenancy values in JSON "
                          "(allowedHosts, allowWildcardHosts, ...); default: the chart's defaults")
    _operator_identity_args(run)
    run.add_argument("--leader-election", action="store_true",
                     help="run only while holding the Lease <operator-instance>-leader in --operator-namespace")
    run.add_argument("--leader-identity", help="this candidate's name in the Lease (default: $POD_NAME)")
    run.add_argument("--lease-duration", type=int, default=15, help="seconds a standby waits for a silent leader")
    run.add_argument("--renew-deadline", type=int, default=10, help="seconds the leader may fail to renew")
    run.add_argument("--retry-period", type=int, default=2, help="seconds between Lease attempts")
    run.add_argument("--shards", type=int, default=0, metavar="S",
                     help="share the work among every running replica: the GatewayDeployments in S shards (by the "
                          "hash of their uid), each held through the Lease <operator-instance>-shard-<i> by one "
                          "replica (instead of --leader-election); 0: off")
    run.add_argument("--verbose", action="store_true")
    run.set_defaults(func=cmd_run)

    check = sub.add_parser("check", help="check GatewayDeployments against the CRD's rules and the chart's tenancy "
                           "policy, offline")
    check.add_argument("-f", "--file", required=True, action="append", help="YAML file, repeatable (- for stdin)")
    check.add_argument("--values", action="append", metavar="VALUES.yaml",
                       help="the operator chart's values files the cluster installed it with (repeatable, as helm's "
                       "-f): their tenancy policy instead of the chart's defaults")
    check.add_argument("--namespace", default="default", help="namespace when the file names none (the tenancy "
                       "policy's allowedHosts are per namespace)")
    check.set_defaults(func=cmd_check)

    render = sub.add_parser("render", help="print the objects a GatewayDeployment produces")
    render.add_argument("-f", "--file", required=True, action="append", help="YAML file, repeatable (- for stdin)")
    render.add_argument("--namespace", default="default", help="namespace when the file names none")
    render.add_argument("--values", action="append", metavar="VALUES.yaml",
                        help="the operator chart's values files (as for check): their tenancy policy")
    _operator_identity_args(render)
    render.set_defaults(func=cmd_render)

    crd = sub.add_parser("crd", help="print the CustomResourceDefinition")
    crd.set_defaults(func=cmd_crd)

    acl = sub.add_parser("redis-acl", help="print the least-privilege Redis ACL user of a GatewayDeployment")
    acl.add_argument("--namespace", "-n", required=True, help="the GatewayDeployment's namespace")
    acl.add_argument("--name", required=True, help="the GatewayDeployment's name")
    acl.add_argument("--prefix", help="its spec.redis.prefix, when set (default gwop:<namespace>:<name>:)")
    acl.add_argument("--db", type=int, default=0, help="its Redis db (not 0: SELECT is needed too)")
    acl.add_argument("--user", default="gateway", help="the ACL user's name")
    acl.add_argument("--password", default="<password>", help="written after '>' (default: a placeholder)")
    acl.set_defaults(func=cmd_redis_acl)

    tenancy = sub.add_parser("tenancy-policy", help="print the chart's tenancy admission policy template")
    tenancy.set_defaults(func=cmd_tenancy_policy)

    version = sub.add_parser("version", help="print the operator's release, its chart's and the praisonai-bot "
                             "releases it was tested with")
    version.add_argument("--output", "-o", choices=["text", "json"], default="text")
    version.set_defaults(func=cmd_version)
    return p


def _operator_identity_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--operator-namespace", default=os.environ.get("POD_NAMESPACE", "gateway-operator"),
                   help="namespace of the operator's pods (a managed Redis admits their probe)")
    p.add_argument("--operator-instance", default=os.environ.get("OPERATOR_INSTANCE", "gateway-operator"),
                   help="app.kubernetes.io/instance of the operator's pods (the Helm release)")
    p.add_argument("--managed-redis-image", default=api.DEFAULT_MANAGED_REDIS_IMAGE,
                   help="image of a managed Redis whose spec.redis.managed.image is empty")


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except InputError as e:
        print(f"gateway-operator: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
