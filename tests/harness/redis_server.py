"""A real ``redis-server`` process on a free loopback port, stoppable and restartable.

Optionally shaped like a managed Redis: TLS-only (``tls=``, from ``harness.tls``), ACL users
(``users=``), and commands refused as unknown (``renamed=``, e.g. ``("CONFIG", "INFO")``).
"""
from __future__ import annotations

import secrets
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Mapping, Sequence

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from .processes import free_port, terminate
from .wait import WaitTimeout, until
from .tls import ServerCert



class RedisServer:
    """One redis-server. ``stop`` and ``start`` keep the same port so clients can reconnect."""

    def __init__(self, password: str | None = None, host: str = "127.0.0.1", port: int | None = None,
                 persistent: bool = False, *, tls: ServerCert | None = None,
                 users: Mapping[str, str] | None = None, renamed: Sequence[str] = ()) -> None:
        """``persistent``: an append-only file in its directory, so a restart keeps the data (and the
        operator's canary: a restart without persistence is a lost dedup history, DedupHistoryLost).

        ``tls``: serve TLS only, on ``port``, with that certificate (no client certificates asked).
        ``users``: ACL users, name -> rule string (``"on >pw ~gwop:* -@all +get +set"``, split on
        whitespace, so no spaces inside a rule), set from scratch at every start. The admin client is
        the ``default`` user with ``password``; leave ``default`` out of ``users``.
        ``renamed``: commands clients see as unknown (as managed services refuse CONFIG, INFO ...);
        they are renamed to a secret name only this object uses, so ``use_certificate`` still works."""
        self.persistent = persistent
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        if {"AUTH", "ACL"} & {c.upper() for c in renamed}:
            raise ValueError("AUTH and ACL cannot be renamed here: the admin client needs them")
        self.binary, self.host, self.password = binary, host, password
        self.port = port or free_port(host)
        self.tls = tls
        self.users: dict[str, str] = dict(users or {})
        self.renamed = {c.upper(): f"{c.upper()}_{secrets.token_hex(8)}" for c in renamed}
        self.dir = Path(tempfile.mkdtemp(prefix="gwop-redis-"))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"{'rediss' if self.tls else 'redis'}://{self.host}:{self.port}/0"

    def client(self, username: str | None = None, password: str | None = None, **overrides: Any) -> redis.Redis:
        """The admin client (``default`` user) or, with ``username``, that ACL user. Over TLS it trusts
        the served certificate's CA without matching the host name, and does not verify at all while
        that certificate is outside its validity window (so start-up works with an expired one).
        ``overrides`` go to ``redis.Redis`` last (``ssl_ca_certs=``, ``ssl_check_hostname=True``, ``host=``)."""
        kwargs: dict[str, Any] = dict(host=self.host, port=self.port, socket_timeout=2, decode_responses=True,
                                      username=username, password=self.password if username is None else password)
        if self.tls is not None:
            kwargs.update(ssl=True, ssl_ca_certs=str(self.tls.ca_path), ssl_check_hostname=False,
                          ssl_cert_reqs="required" if self.tls.valid_now else "none")
        kwargs.update(overrides)
        return redis.Redis(**kwargs)

    def admin(self, command: str, *args: Any) -> Any:
        """Run ``command`` as the admin, by its secret name if it is renamed; one try, no retries
        (redis-py's default retries back off for seconds, which made the start-up wait slow)."""
        with self.client(retry=Retry(NoBackoff(), 0)) as c:
            return c.execute_command(self.renamed.get(command.upper(), command), *args)

    def start(self) -> "RedisServer":
        args = [self.binary, "--bind", self.host, "--save", "",
                "--appendonly", "yes" if self.persistent else "no", "--dir", str(self.dir), "--daemonize", "no"]
        if self.tls is None:
            args += ["--port", str(self.port)]
        else:
            args += ["--port", "0", "--tls-port", str(self.port), "--tls-cert-file", str(self.tls.cert_path),
                     "--tls-key-file", str(self.tls.key_path), "--tls-ca-cert-file", str(self.tls.ca_path),
                     "--tls-auth-clients", "no"]
        if self.password:
            args += ["--requirepass", self.password]
        for command, secret in self.renamed.items():
            args += ["--rename-command", command, secret]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        proc = self.proc

        def answers() -> bool:
            if proc.poll() is not None:
                raise WaitTimeout("redis-server exited")
            try:
                return bool(self.admin("PING"))
            except redis.RedisError:
                return False
        try:
            until(answers, timeout=10, interval=0.05, what=f"redis-server on port {self.port}", tolerate=())
        except WaitTimeout:
            err = proc.stderr.read().decode(errors="replace")[-2000:] if proc.poll() is not None and proc.stderr else ""
            if self.tls is not None and "tls" in err.lower():
                err += f"\n{self.binary} may be built without TLS (BUILD_TLS=yes); a TLS RedisServer needs it"
            self.stop()
            raise RuntimeError(f"redis-server on port {self.port} did not start: {err}".rstrip(": ")) from None
        for name, rules in self.users.items():
            self._setuser(name, rules)
        return self

    def _setuser(self, name: str, rules: str) -> None:
        self.admin("ACL", "SETUSER", name, "reset", *rules.split())

    def set_user(self, name: str, rules: str) -> None:
        """Replace ACL user ``name``'s rules (from ``reset``) now; kept for later restarts too."""
        self._setuser(name, rules)
        self.users[name] = rules

    def acl_log(self, count: int | None = None) -> list[dict[str, Any]]:
        """``ACL LOG`` entries, newest first (``reason``, ``object``, ``username``, ...)."""
        with self.client() as c:
            return c.acl_log(count)

    def use_certificate(self, cert: ServerCert) -> None:
        """Serve ``cert`` to new connections from now on (open ones keep theirs), and after restarts."""
        if self.tls is None:
            raise RuntimeError("use_certificate needs a TLS RedisServer (tls=...)")
        # The connection that asks is made over the old certificate, so it trusts the old CA.
        self.admin("CONFIG", "SET", "tls-cert-file", str(cert.cert_path), "tls-key-file", str(cert.key_path),
                   "tls-ca-cert-file", str(cert.ca_path))
        self.tls = cert

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGCONT)  # a paused server cannot act on SIGTERM
        terminate(self.proc, grace=5)
        if self.proc is not None and self.proc.stderr is not None:
            self.proc.stderr.close()
        self.proc = None

    def pause(self) -> None:
        """A hung Redis (SIGSTOP): connections are accepted by the kernel, nothing answers."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def restart(self) -> None:
        self.stop()
        self.start()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
