"""watch_liveness.Watches: when a watch counts as stalled (a fake clock; no sleeping)."""
from __future__ import annotations

from gateway_operator.loop.watch_liveness import Watches

KIND, A, B = "GatewayDeployment", ("ns", "a"), ("ns", "b")


def test_a_quiet_watch_that_delivered_everything_is_alive() -> None:
    w = Watches(bound=10)
    w.delivered(KIND, A, "5")
    for now in range(0, 100, 5):
        assert w.listed(KIND, {A: 5}, float(now)) == ""


def test_a_change_the_watch_never_delivers_is_a_stall_once_the_bound_passed() -> None:
    w = Watches(bound=10)
    w.delivered(KIND, A, "5")
    assert w.listed(KIND, {A: 7}, 100.0) == ""
    assert w.listed(KIND, {A: 7}, 109.0) == ""      # within the bound: a watch may lag
    why = w.listed(KIND, {A: 8}, 111.0)             # still behind, 11 s after the first list showed it
    assert "GatewayDeployment watch delivered no change of ns/a for 11s" in why and w.stalled == why


def test_a_late_delivery_clears_it() -> None:
    w = Watches(bound=10)
    w.delivered(KIND, A, "5")
    w.listed(KIND, {A: 7}, 100.0)
    w.delivered(KIND, A, "7")
    assert w.listed(KIND, {A: 7}, 200.0) == ""
    w.listed(KIND, {A: 9}, 200.0)
    w.delivered(KIND, A, "8")                       # not yet what the list showed
    assert w.listed(KIND, {A: 9}, 211.0) != ""


def test_an_object_the_watch_never_delivered_counts_and_a_deleted_one_does_not() -> None:
    w = Watches(bound=10)
    w.listed(KIND, {B: 3}, 0.0)
    assert "ns/b" in w.listed(KIND, {B: 3}, 11.0)
    w = Watches(bound=10)
    w.listed(KIND, {B: 3}, 0.0)
    assert w.listed(KIND, {}, 11.0) == ""           # gone before its watch said so: nothing is owed
    w.delivered(KIND, A, "4")
    w.listed(KIND, {A: 6}, 20.0)
    w.delivered(KIND, A, "6", deleted=True)
    assert w.listed(KIND, {}, 40.0) == ""


def test_kinds_are_apart_and_opaque_versions_are_not_compared() -> None:
    w = Watches(bound=10)
    w.delivered("Pod", A, "9")                      # another stream's delivery proves nothing here
    w.listed(KIND, {A: 9}, 0.0)
    assert w.listed(KIND, {A: 9}, 11.0) != ""
    w = Watches(bound=10)
    w.delivered(KIND, A, "not-a-number")
    w.delivered(KIND, A, "3")
    assert w.listed(KIND, {A: 3}, 50.0) == ""


def test_the_liveness_probe_fails_once_a_watch_is_stalled() -> None:
    import kopf
    import pytest

    from gateway_operator.loop import handlers
    memo = kopf.Memo(watches=Watches(bound=10))
    assert handlers.watch_probe(memo=memo) == "delivering"
    memo.watches.listed(KIND, {A: 3}, 0.0)
    memo.watches.listed(KIND, {A: 3}, 11.0)
    with pytest.raises(kopf.PermanentError, match="GatewayDeployment watch delivered no change"):
        handlers.watch_probe(memo=memo)


def test_the_secret_watch_keeps_each_secrets_version_and_controller_until_it_goes() -> None:
    """What the Secret watch leaves for the passes (handlers.secret_changed): the version and the
    controller of each Secret as last delivered; a Secret that lost its controller, or is gone, has
    none, so that a generated one is never taken as ours on a stale word."""
    w = Watches()
    w.delivered("Secret", A, "5", controller="uid-1")
    assert (w.version("Secret", *A), w.controller("Secret", *A)) == (5, "uid-1")
    w.delivered("Secret", A, "4", controller="uid-2")        # an older version, delivered late: ignored
    assert (w.version("Secret", *A), w.controller("Secret", *A)) == (5, "uid-1")
    w.delivered("Secret", A, "6")                            # its ownerReference removed
    assert (w.version("Secret", *A), w.controller("Secret", *A)) == (6, None)
    w.delivered("Secret", A, "7", controller="uid-1")
    w.delivered("Secret", A, "7", deleted=True)
    assert (w.version("Secret", *A), w.controller("Secret", *A)) == (None, None)
