"""What hack/node.sh does in Python (stdlib only, the host's python3): one subcommand each.

  render SRC DEST                 every file under SRC copied to the same path under DEST, ${NAME}
                                  replaced by the environment's NAME for the names in $NODE_VARS
                                  (any other ${...} is an error: nothing renders half-filled)
  iptables-chains                 "TABLE CHAIN" of every iptables chain now (the snapshot network takes)
  remove-new-chains BEFORE        removes the chains that are not in BEFORE (a snapshot) and the rules
                                  of older chains that jump to them
  ipsets                          the names of the host's ipsets now (the snapshot network takes)
  remove-new-ipsets BEFORE        destroys the ipsets not in BEFORE with kube-router's names (KUBE-SRC-/
                                  KUBE-DST- of its network policy controller, TMP- of an interrupted
                                  restore); the rules naming them went first (remove-new-chains)
  netns                           the network namespace paths in `ctr containers info` JSON on stdin
  remove-netns LIST               unmounts and removes the network namespaces of LIST (/run/netns/*)
  unmount-under DIR               unmounts every mount at or under DIR, deepest first
  kill-shims SOCKET SOCKET_DIR    kills the containerd shims serving SOCKET, removes their sockets
                                  (under SOCKET_DIR, or a containerd 1.6 node's /run/containerd/s)
  dns-answers IP                  exit 0 when IP:53 resolves kubernetes.default (as a pod asks it)
  tcp-answers IP PORT             exit 0 when IP:PORT accepts a connection
"""
from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import struct
import subprocess
import sys
from pathlib import Path

BUILTIN_CHAINS = {"INPUT", "OUTPUT", "FORWARD", "PREROUTING", "POSTROUTING"}


def log(message: str) -> None:
    print(f"[node] {message}", file=sys.stderr)


def render(src: str, dest: str) -> None:
    names = os.environ["NODE_VARS"].split()
    values = {n: os.environ[n] for n in names}
    placeholder = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
    for path in sorted(Path(src).rglob("*")):
        if not path.is_file():
            continue
        text = path.read_text()
        unknown = {m for m in placeholder.findall(text) if m not in values}
        if unknown:
            sys.exit(f"{path}: no value for {', '.join(sorted(unknown))} (NODE_VARS: {' '.join(names)})")
        out = Path(dest) / path.relative_to(src)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(placeholder.sub(lambda m: values[m.group(1)], text))


def _iptables_save() -> list[str]:
    return subprocess.run(["iptables-save"], capture_output=True, text=True).stdout.splitlines()


def _chains(lines: list[str]) -> list[tuple[str, str]]:
    table, chains = "", []
    for line in lines:
        if line.startswith("*"):
            table = line[1:]
        elif line.startswith(":"):
            chains.append((table, line[1:].split()[0]))
    return chains


def iptables_chains() -> None:
    for table, chain in sorted(set(_chains(_iptables_save()))):
        print(table, chain)


def remove_new_chains(before_file: str) -> None:
    before = {tuple(line.split()) for line in open(before_file) if line.strip()}
    lines = _iptables_save()
    new = [(t, c) for t, c in _chains(lines) if (t, c) not in before and c not in BUILTIN_CHAINS]
    newset, table, commands = set(new), "", []
    for line in lines:
        if line.startswith("*"):
            table = line[1:]
        elif line.startswith("-A "):
            words = shlex.split(line)
            flag = "-j" if "-j" in words else ("-g" if "-g" in words else None)
            target = words[words.index(flag) + 1] if flag else None
            if (table, words[1]) not in newset and (table, target) in newset:
                commands.append(["iptables", "-t", table, "-D", words[1], *words[2:]])
    commands += [["iptables", "-t", t, "-F", c] for t, c in new]
    commands += [["iptables", "-t", t, "-X", c] for t, c in new]
    for command in commands:
        if subprocess.run(command, capture_output=True).returncode:
            log(f"failed: {shlex.join(command)}")


def _ipsets() -> list[str]:
    out = subprocess.run(["ipset", "list", "-n"], capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"ipset list failed: {out.stderr.strip()}")
    return sorted({name for name in out.stdout.split() if name})


def ipsets() -> None:
    for name in _ipsets():
        print(name)


def remove_new_ipsets(before_file: str) -> None:
    before = set(Path(before_file).read_text().split())
    for name in _ipsets():
        if name not in before and name.startswith(("KUBE-", "TMP-")):
            if subprocess.run(["ipset", "destroy", name], capture_output=True).returncode:
                log(f"failed: ipset destroy {name}")


def _unmount(path: str) -> bool:
    return not subprocess.run(["umount", path], capture_output=True).returncode \
        or not subprocess.run(["umount", "-l", path], capture_output=True).returncode


def remove_netns(list_file: str) -> None:
    if not Path(list_file).exists():
        return
    for ns in sorted(set(Path(list_file).read_text().split())):
        if ns.startswith(("/run/netns/", "/var/run/netns/")) and os.path.lexists(ns):
            _unmount(ns)
            Path(ns).unlink(missing_ok=True)


def unmount_under(directory: str) -> None:
    directory = directory.rstrip("/")
    mounts = [line.split()[1] for line in open("/proc/mounts")]
    for m in sorted({m for m in mounts if m == directory or m.startswith(directory + "/")}, reverse=True):
        if not _unmount(m):
            log(f"could not unmount {m}")


def netns() -> None:
    spec = json.load(sys.stdin).get("Spec") or {}
    for ns in (spec.get("linux") or {}).get("namespaces") or []:
        if ns.get("type") == "network" and ns.get("path"):
            print(ns["path"])


def kill_shims(containerd_socket: str, socket_dir: str) -> None:
    """containerd 2's runc shim runs as `containerd-shim-runc-v2-<version> -namespace k8s.io -id
    <id> -address <containerd socket>` (the cmdline's last NUL gives the trailing space), in its
    own process group (it outlives containerd), listening on SOCKET_DIR/<sha256>."""
    marker = re.compile(r"containerd-shim.*-address " + re.escape(containerd_socket) + " ")
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and marker.search((proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()):
                pids.append(int(proc.name))
        except (OSError, UnicodeDecodeError):
            continue
    if not pids:
        return
    inodes = set()  # the unix sockets a shim listens on
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes.add(link[8:-1])
        except OSError:
            pass
    prefixes = (socket_dir + "/", "/run/containerd/s/")
    paths = []
    for line in open("/proc/net/unix").read().splitlines()[1:]:
        f = line.split()
        if len(f) >= 8 and f[6] in inodes and f[7].startswith(prefixes):
            paths.append(f[7])
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    log(f"killed leftover shims {' '.join(map(str, pids))}")
    for path in paths:
        Path(path).unlink(missing_ok=True)


def dns_answers(ip: str) -> None:
    q = struct.pack(">HHHHHH", 0x4757, 0x0100, 1, 0, 0, 0)
    q += b"".join(bytes([len(p)]) + p.encode() for p in "kubernetes.default.svc.cluster.local".split(".")) + b"\0"
    q += struct.pack(">HH", 1, 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(1)
    s.sendto(q, (ip, 53))
    r = s.recv(512)
    sys.exit(0 if (r[3] & 0x0F) == 0 and struct.unpack(">H", r[6:8])[0] >= 1 else 1)


def tcp_answers(ip: str, port: str) -> None:
    socket.create_connection((ip, int(port)), 1).close()


COMMANDS = {"render": render, "iptables-chains": iptables_chains, "remove-new-chains": remove_new_chains,
            "ipsets": ipsets, "remove-new-ipsets": remove_new_ipsets, "remove-netns": remove_netns,
            "unmount-under": unmount_under, "netns": netns, "kill-shims": kill_shims, "dns-answers": dns_answers, "tcp-answers": tcp_answers}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.exit(__doc__)
    COMMANDS[sys.argv[1]](*sys.argv[2:])
