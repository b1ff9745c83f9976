"""Self-check of the TLS / ACL / managed-Redis test support (``harness.tls``, ``RedisServer(tls=...)``).

Unit-level: real ``redis-server`` processes on loopback, no cluster; a few seconds in all. What is
asserted is what a client of such a server sees, so later tests can trust the stand-in.
"""
from __future__ import annotations

import socket
import ssl
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Iterator

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from harness.redis_server import RedisServer
from harness.tls import CA, ServerCert, make_ca, server_cert

PASSWORD = "admin-pw"
ONCE = Retry(NoBackoff(), 0)  # redis-py 8 retries a failed connect 3 times with seconds of back-off


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    root = tmp_path_factory.mktemp("pki")
    ca, wrong = make_ca(root / "ca"), make_ca(root / "wrong-ca", name="an unrelated CA")
    now = datetime.now(timezone.utc)
    return {
        "ca": ca, "wrong": wrong,
        "good": server_cert(ca, root / "good", dns=("localhost",), ips=("127.0.0.1",)),
        "expired": server_cert(ca, root / "expired", not_after=now - timedelta(days=1)),
        "named": server_cert(ca, root / "named", dns=("redis.test.internal",), ips=("127.0.0.1",)),
        "other_ca": server_cert(wrong, root / "other-ca"),
    }


@pytest.fixture
def serve() -> Iterator:
    servers: list[RedisServer] = []

    def start(**kwargs: object) -> RedisServer:
        server = RedisServer(password=PASSWORD, **kwargs)  # type: ignore[arg-type]
        servers.append(server)
        return server.start()
    yield start
    for server in servers:
        server.close()


def verifying_client(server: RedisServer, ca_path: Path, host: str = "127.0.0.1") -> redis.Redis:
    """What a careful user's client does: trust ``ca_path`` only, check the host name."""
    return redis.Redis(host=host, port=server.port, password=PASSWORD, ssl=True, ssl_ca_certs=str(ca_path),
                       ssl_check_hostname=True, ssl_cert_reqs="required", socket_timeout=2, retry=ONCE)


def connect_error(client: redis.Redis) -> str:
    with pytest.raises(redis.ConnectionError) as failure:
        client.ping()
    return str(failure.value)


def test_the_pem_files_and_dataclass_describe_one_chain(pki: dict) -> None:
    good, ca = pki["good"], pki["ca"]
    assert isinstance(good, ServerCert) and isinstance(ca, CA)
    assert good.ca_pem == ca.pem == good.ca_path.read_text() and ca.pem.startswith("-----BEGIN CERTIFICATE-----")
    assert "PRIVATE KEY" in good.key_path.read_text() and good.valid_now and not pki["expired"].valid_now
    with pytest.raises(Exception):
        good.cert_path = Path("/elsewhere")  # type: ignore[misc]  # frozen


def test_a_client_trusting_the_ca_pings_the_tls_only_server(pki: dict, serve) -> None:
    server = serve(tls=pki["good"])
    assert server.url == f"rediss://127.0.0.1:{server.port}/0"
    assert verifying_client(server, pki["good"].ca_path).ping()
    assert verifying_client(server, pki["good"].ca_path, host="localhost").ping()
    assert redis.from_url(server.url, password=PASSWORD, ssl_ca_certs=str(pki["ca"].cert_path)).ping()
    assert redis.from_url(server.url, password=PASSWORD, ssl_ca_data=pki["good"].ca_pem).ping()
    # TLS only: a plain-text client on that port gets no Redis answer.
    with pytest.raises(redis.ConnectionError):
        redis.Redis(host="127.0.0.1", port=server.port, password=PASSWORD, socket_timeout=2, retry=ONCE).ping()
    # And TLS is not authentication: the password is still required.
    with pytest.raises(redis.AuthenticationError):
        verifying_client(server, pki["good"].ca_path).execute_command("AUTH", "wrong")


def test_a_client_trusting_the_wrong_ca_fails_verification(pki: dict, serve) -> None:
    server = serve(tls=pki["good"])
    assert "certificate verify failed" in connect_error(verifying_client(server, pki["wrong"].cert_path))


def test_an_expired_certificate_is_refused_by_the_client(pki: dict, serve) -> None:
    server = serve(tls=pki["expired"])
    assert server.client().ping()  # the admin client still works, for start-up and set-up
    message = connect_error(verifying_client(server, pki["ca"].cert_path))
    assert "certificate has expired" in message, message


def test_a_name_outside_the_san_is_a_hostname_mismatch(pki: dict, serve) -> None:
    server = serve(tls=pki["named"])
    message = connect_error(verifying_client(server, pki["ca"].cert_path, host="localhost"))
    assert "Hostname mismatch" in message, message
    assert verifying_client(server, pki["ca"].cert_path).ping()  # 127.0.0.1 is in its SAN
    # The DNS name it does carry verifies (no resolver needed: connect to the IP, ask for the name).
    context = ssl.create_default_context(cafile=str(pki["ca"].cert_path))
    with socket.create_connection(("127.0.0.1", server.port), timeout=2) as raw, \
            context.wrap_socket(raw, server_hostname="redis.test.internal") as tls:
        assert tls.getpeercert()["subjectAltName"] == (("DNS", "redis.test.internal"), ("IP Address", "127.0.0.1"))


def test_an_acl_user_without_set_is_refused_and_logged(pki: dict, serve) -> None:
    rules = "on >reader-pw ~gwop:ns:n:* resetchannels -@all +get"
    server = serve(tls=pki["good"], users={"reader": rules})
    reader = server.client("reader", "reader-pw")
    assert reader.get("gwop:ns:n:k") is None
    with pytest.raises(redis.exceptions.NoPermissionError):
        reader.set("gwop:ns:n:k", "v")
    entry = server.acl_log()[0]
    assert (entry["username"], entry["reason"], entry["object"]) == ("reader", "command", "set")
    with pytest.raises(redis.exceptions.NoPermissionError):
        reader.get("other:key")  # outside its key pattern
    assert server.acl_log()[0]["reason"] == "key"

    server.set_user("reader", rules + " +set")
    assert reader.set("gwop:ns:n:k", "v") and reader.get("gwop:ns:n:k") == "v"
    server.restart()  # users (as last set) come back; TLS and port are kept
    assert server.client("reader", "reader-pw").set("gwop:ns:n:k", "w")
    with pytest.raises(redis.AuthenticationError):
        server.client("reader", "not-its-password", retry=ONCE).ping()


def test_renamed_config_and_info_are_unknown_commands(pki: dict, serve) -> None:
    server = serve(tls=pki["good"], renamed=("CONFIG", "INFO"))
    c = server.client()
    assert c.ping()
    for refused in (lambda: c.config_get("maxmemory"), c.info, lambda: c.execute_command("CONFIG", "SET", "x", "y")):
        with pytest.raises(redis.ResponseError, match="unknown command"):
            refused()
    assert c.set("gwop:k", "v") and c.get("gwop:k") == "v"


def test_the_served_certificate_can_be_swapped_at_runtime(pki: dict, serve) -> None:
    server = serve(tls=pki["good"], renamed=("CONFIG",))  # works while CONFIG is refused to clients
    before = verifying_client(server, pki["ca"].cert_path)
    assert before.ping()
    server.use_certificate(pki["other_ca"])
    assert before.ping()  # an open connection keeps its session
    assert "certificate verify failed" in connect_error(verifying_client(server, pki["ca"].cert_path))
    assert verifying_client(server, pki["wrong"].cert_path).ping()
    server.restart()  # and a restart keeps serving the new one
    assert verifying_client(server, pki["wrong"].cert_path).ping()
    assert server.client().ping()


def test_a_plain_server_is_unchanged(serve) -> None:
    server = serve(persistent=True)
    assert server.url.startswith("redis://")
    c = server.client()
    assert c.set("k", "v")
    server.pause()
    with pytest.raises(redis.TimeoutError):
        redis.Redis(host=server.host, port=server.port, password=PASSWORD, socket_timeout=0.3,
                    retry=ONCE).ping()
    server.resume()
    server.restart()
    assert server.client().get("k") == "v"  # persistent: the append-only file kept it
