"""``gateway-operator``: run the operator, or work offline on GatewayDeployment files.

    gateway-operator run [--namespace NS ...] [--metrics-port P] [--liveness-port P] [--log-format F]
    gateway-operator render -f gatewaydeployment.yaml   # the objects it would produce
    gateway-operator check -f gatewaydeployment.yaml    # the CRD's rules, offline
    gateway-operator crd                                # the CustomResourceDefinition
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any, Sequence

import yaml

from . import api


def _documents(path: str) -> list[dict[str, Any]]:
    text = sys.stdin.read() if path == "-" else Path(path).read_text()
    return [d for d in yaml.safe_load_all(text) if isinstance(d, dict) and d.get("kind") == api.KIND]


def cmd_crd(_: argparse.Namespace) -> int:
    from .crd import crd
    sys.stdout.write(yaml.safe_dump(crd(), sort_keys=False, width=100))
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from .offline import check
    failed = 0
    docs = _documents(args.file)
    if not docs:
        print(f"{args.file}: no {api.KIND} found", file=sys.stderr)
        return 1
    for doc in docs:
        name = (doc.get("metadata") or {}).get("name", "?")
        errors = check(doc)
        if errors:
            failed += 1
            print(f'The {api.KIND} "{name}" is invalid:', file=sys.stderr)
            for error in errors:
                print(f"* {error}", file=sys.stderr)
        else:
            print(f"{api.KIND} {name!r}: valid")
    return 1 if failed else 0


def cmd_render(args: argparse.Namespace) -> int:
    from .offline import render_objects
    for doc in _documents(args.file):
        sys.stdout.write(yaml.safe_dump_all(render_objects(doc, args.namespace), sort_keys=False))
        sys.stdout.write("---\n")
    return 0


class _QuietHandlerSuccess(logging.Filter):
    """kopf logs every watch-event handler call at INFO; those say nothing to a reader."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno == logging.INFO and record.getMessage().startswith("Handler ")
                    and record.getMessage().endswith("succeeded."))


def cmd_run(args: argparse.Namespace) -> int:
    if args.kubeconfig:  # kopf's login reads the standard variable, at import time
        os.environ["KUBECONFIG"] = args.kubeconfig
    import kopf
    import prometheus_client

    from . import handlers  # noqa: F401  (registers the kopf handlers)
    from .controller import ControllerSettings

    kopf.configure(verbose=args.verbose, log_format=kopf.LogFormat[args.log_format.upper()])
    logging.getLogger("kopf.objects").addFilter(_QuietHandlerSuccess())
    if args.metrics_port:
        prometheus_client.start_http_server(args.metrics_port, addr=args.bind_address)
    memo = kopf.Memo(kubeconfig=args.kubeconfig,
                     controller_settings=ControllerSettings(resync_seconds=args.resync_seconds))
    liveness = f"http://{args.bind_address}:{args.liveness_port}/healthz" if args.liveness_port else None
    kopf.run(standalone=True, namespaces=args.namespace or [], clusterwide=not args.namespace,
             liveness_endpoint=liveness, memo=memo)
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
    run.add_argument("--bind-address", default="0.0.0.0", help="address of the metrics and liveness servers")
    run.add_argument("--log-format", choices=["plain", "full", "json"], default="full")
    run.add_argument("--resync-seconds", type=float, default=60.0, help="full reconcile at least this often")
    run.add_argument("--verbose", action="store_true")
    run.set_defaults(func=cmd_run)

    check = sub.add_parser("check", help="check GatewayDeployments against the CRD's rules, offline")
    check.add_argument("-f", "--file", required=True, help="YAML file (or - for stdin)")
    check.set_defaults(func=cmd_check)

    render = sub.add_parser("render", help="print the objects a GatewayDeployment produces")
    render.add_argument("-f", "--file", required=True, help="YAML file (or - for stdin)")
    render.add_argument("--namespace", default="default", help="namespace when the file names none")
    render.set_defaults(func=cmd_render)

    crd = sub.add_parser("crd", help="print the CustomResourceDefinition")
    crd.set_defaults(func=cmd_crd)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
