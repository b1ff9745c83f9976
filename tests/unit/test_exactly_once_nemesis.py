"""Unit tests of the exactly-once checker's nemesis, its pure parts (harness/exactly_once_run.py):
the seeded schedule holds every kind (issue 56's three with the rest), a holder at risk is cut
off or paused past its claim's lease with redeliveries on both sides of it, the gateway launcher
of a pod is found among the host's processes, and the coalesced hook's two dry runs are read as
the API server answered them. No cluster, no network."""
from __future__ import annotations

import itertools
import random

import pytest

from harness import exactly_once
from harness import exactly_once_run as eo
from harness.exactly_once_run import (FAULT_KINDS, HOLD_PAST_LEASE_S, SWITCH, Proc, coalesce_outcome, coalesced,
                                      fault_order, in_pod, is_launcher, launcher_pids, parse_environ, risk_plan)

UID = "0b5c2d9e-4f1a-4c3e-9d7a-2f6e8b1c0a11"
LAUNCH = ("python3", "/etc/gateway-operator/launch.py", "--config", "/etc/gateway-operator/gateway.yaml")


# -- the schedule --------------------------------------------------------------------------

def test_every_kind_old_and_new_is_scheduled_and_the_switch_comes_first() -> None:
    assert {"long_partition", "holder_pause", "coalesced_stop"} <= set(FAULT_KINDS)
    assert len(FAULT_KINDS) == len(set(FAULT_KINDS)) == 18   # the 15 kinds before issue 56, none renamed
    first = list(itertools.islice(fault_order(FAULT_KINDS, random.Random(7)), 1 + 2 * (len(FAULT_KINDS) - 1)))
    assert first[0] == SWITCH and SWITCH not in first[1:]
    cycle = first[1:len(FAULT_KINDS)]
    assert sorted(cycle) == sorted(k for k in FAULT_KINDS if k != SWITCH)
    assert first[len(FAULT_KINDS):] == cycle   # round and round, in the same order


def test_the_schedule_is_seeded() -> None:
    def order(seed: int) -> list[str]:
        return list(itertools.islice(fault_order(FAULT_KINDS, random.Random(seed)), 18))
    assert order(3) == order(3) and order(3) != order(4)
    only = list(itertools.islice(fault_order(("holder_pause",), random.Random(1)), 3))
    assert only == ["holder_pause"] * 3
    assert list(fault_order((), random.Random(1))) == []


def test_verify_faults_default_is_every_kind() -> None:
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[2] / "hack/verify-exactly-once.py"
    spec = importlib.util.spec_from_file_location("verify_exactly_once", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.settings().faults == FAULT_KINDS


# -- a holder at risk ----------------------------------------------------------------------

@pytest.mark.parametrize("lease", [10.0, 60.0, 90.0])
def test_a_holder_at_risk_is_held_past_the_lease_with_redeliveries_on_both_sides_of_it(lease: float) -> None:
    for seed in range(20):
        plan = risk_plan(lease, random.Random(seed))
        assert plan.hold_s == lease + HOLD_PAST_LEASE_S
        # its turn runs from before the cut until after the heal
        assert plan.delay_s >= plan.hold_s + 20.0
        # every redelivery during the cut; some while the claim still holds, some after the lease
        assert all(0.0 < at < plan.hold_s for at in plan.redeliver_at)
        assert any(at < lease for at in plan.redeliver_at) and sum(at > lease for at in plan.redeliver_at) >= 2
    assert risk_plan(60.0, random.Random(5)) == risk_plan(60.0, random.Random(5))


def test_a_run_with_the_default_lease_holds_each_holder_75s() -> None:
    assert risk_plan(60.0, random.Random(1)).hold_s == 75.0


# -- finding the gateway launcher ------------------------------------------------------------

def test_the_launcher_is_python_running_launch_py() -> None:
    assert is_launcher(LAUNCH) and is_launcher(("/usr/bin/python3.12", "launch.py"))
    assert not is_launcher(("/pause",)) and not is_launcher(())
    assert not is_launcher(("sh", "-c", "python3 /etc/gateway-operator/launch.py"))
    assert not is_launcher(("python3", "-m", "harness.llm_standin", "--port", "8080"))


@pytest.mark.parametrize("cgroup", [
    f"0::/kubepods/besteffort/pod{UID}/3f2a9c",                                     # cgroupfs
    f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID.replace('-', '_')}.slice/cri-x.scope",
])
def test_a_pods_cgroup_is_recognised_in_both_drivers_layouts(cgroup: str) -> None:
    assert in_pod(cgroup, UID)
    assert not in_pod(cgroup, "1" + UID[1:])


def test_the_launcher_of_the_pod_is_found_by_its_cgroup() -> None:
    procs = [Proc(10, f"0::/kubepods/pod{UID}/a", ("/pause",)),
             Proc(11, f"0::/kubepods/pod{UID}/b", LAUNCH),
             Proc(12, "0::/kubepods/podother/b", LAUNCH, {"HOSTNAME": "eo-bot-1"}),     # another replica
             Proc(13, f"0::/kubepods/pod{UID}/b", ("python3", "-c", "print(1)")),    # not the launcher
             Proc(14, "0::/system.slice/sshd.service", ("sshd",))]
    assert launcher_pids(procs, UID, "eo-bot-0") == [11]


def test_without_a_cgroup_that_names_the_pod_the_launcher_is_found_by_its_hostname() -> None:
    procs = [Proc(21, "0::/", LAUNCH, {"HOSTNAME": "eo-bot-0", "PATH": "/usr/bin"}),
             Proc(22, "0::/", LAUNCH, {"HOSTNAME": "eo-bot-1"}),
             Proc(23, "0::/", LAUNCH, None)]   # its environment could not be read
    assert launcher_pids(procs, UID, "eo-bot-0") == [21]
    assert launcher_pids(procs, UID, "eo-bot-9") == []


def test_environ_is_parsed() -> None:
    raw = b"HOSTNAME=eo-bot-0\0PATH=/usr/bin:/bin\0EMPTY=\0A=b=c\0junk\0"
    assert parse_environ(raw) == {"HOSTNAME": "eo-bot-0", "PATH": "/usr/bin:/bin", "EMPTY": "", "A": "b=c"}


# -- the coalesced hook ----------------------------------------------------------------------

def test_the_coalesced_copy_coalesces_every_hook_on_more_than_one_replica() -> None:
    live = {"apiVersion": "gateway-operator.dev/v1alpha1", "kind": "GatewayDeployment",
            "metadata": {"name": "eo-bot", "namespace": "exactly-once", "uid": "u", "resourceVersion": "9"},
            "spec": {"replicas": 3, "config": {"hooks": {"hooks": [{"path": "deploy", "message": "m"}]}}},
            "status": {"conditions": []}}
    body = coalesced(live, "Refuse", "eo-bot-coalesced", 3)
    assert body["metadata"] == {"name": "eo-bot-coalesced", "namespace": "exactly-once"}
    assert (body["spec"]["replicas"], body["spec"]["replicaPolicy"]) == (3, "Refuse")
    assert body["spec"]["config"]["hooks"]["hooks"][0]["coalesce"]["group_key"] == "{session}"
    assert "status" not in body and "coalesce" not in live["spec"]["config"]["hooks"]["hooks"][0]   # a copy


REFUSAL = ('The GatewayDeployment "eo-bot-coalesced" is invalid: spec: Invalid value: "object": hooks[].coalesce '
           'with more than one replica loses webhooks at any stop under replicaPolicy Refuse ...')
WARNING = 'Warning: replicaPolicy Warn: hooks[].coalesce with 3 replicas loses webhooks at a stop ...'


def test_the_coalesce_outcome_as_the_api_server_answered() -> None:
    refused, warned, said = coalesce_outcome((1, REFUSAL), (0, WARNING + "\n"))
    assert (refused, warned) == (True, True)
    assert said.startswith("Refuse: refused The GatewayDeployment") and "Warn: accepted Warning:" in said
    # accepted under Refuse: not refused, whatever it printed
    assert coalesce_outcome((0, ""), (0, WARNING))[:2] == (False, True)
    # refused for another reason (a message that does not name coalesce): not the refusal asked for
    assert coalesce_outcome((1, 'is invalid: spec: replicas > 1 needs redis'), (0, WARNING))[:2] == (False, True)
    # accepted under Warn without a word about it, or refused under Warn
    assert coalesce_outcome((1, REFUSAL), (0, ""))[1] is False
    assert coalesce_outcome((1, REFUSAL), (1, REFUSAL))[1] is False


def test_the_report_says_whether_coalesce_was_refused() -> None:
    fault = exactly_once.Fault("coalesced_stop", 1.0, 2.0, refused=True, warned=False)
    report = exactly_once.classify([], [], [], [fault], lag=4.0)
    assert (report["coalesce_refused"], report["coalesce_warned"]) == (True, False)
    assert exactly_once.targets_met(report) is False



# -- a holder at risk, driven against fakes (the node's calls replaced: the order of what it does) --

class FakeCluster:
    def get_json(self, *args: str) -> dict:
        if args[0] == "service":
            return {"spec": {"clusterIP": "10.96.0.9" if args[1].endswith("-redis") else "10.96.0.5"}}
        raise AssertionError(f"unexpected get_json{args}")


def gateway(i: int) -> dict:
    return {"metadata": {"name": f"eo-bot-{i}", "uid": f"uid-{i}"}, "status": {"podIP": f"198.18.0.{10 + i}"}}


@pytest.fixture
def nemesis(monkeypatch: pytest.MonkeyPatch):
    """A Nemesis on fakes: three ready gateway pods, a Redis pod, a 60 s lease, no real sleeping;
    every call that would reach the node is recorded in ``calls``."""
    calls: list[tuple] = []
    clock = [1000.0]
    settings = eo.Settings(seed=5)
    provider = eo.Provider(settings, random.Random(1), type("P", (), {"ips": [], "cluster_ip": "10.96.0.5"})(), "t")
    n = eo.Nemesis(FakeCluster(), settings, random.Random(2), provider)
    pods = {"gateway": [gateway(0), gateway(1), gateway(2)], "redis": [{"status": {"podIP": "198.18.0.50"}}]}
    monkeypatch.setattr(n, "_pods", lambda component: pods[component])
    monkeypatch.setattr(n, "_claim_lease", lambda: 60.0)
    monkeypatch.setattr(n, "_restarts", lambda pod: 0)
    monkeypatch.setattr(n, "_exists", lambda pod: True)
    monkeypatch.setattr(n, "_settle", lambda: calls.append(("settle",)))
    monkeypatch.setattr(n, "_iptables", lambda uid, action, rules: calls.append(("iptables", uid, action,
                                                                                 tuple(r[2] for r in rules))) or True)
    monkeypatch.setattr(n, "_in_traffic_until", lambda pod, since, until_at: calls.append(("in_traffic", until_at - since)) or (6.5, ()))

    def slow_turn(kind: str, pod: dict, delay: float) -> tuple[str, float]:
        calls.append(("slow_turn", pod["metadata"]["name"], delay))
        provider.inject("m5-x", "x5-000", delay, [(clock[0], "pod:" + pod["status"]["podIP"], pod["status"]["podIP"])])
        return "m5-x", clock[0] - 2.0
    monkeypatch.setattr(n, "_slow_turn", slow_turn)
    monkeypatch.setattr(eo.time, "time", lambda: clock[0])
    monkeypatch.setattr(eo.time, "sleep", lambda s: (calls.append(("sleep", round(s, 1))), clock.__setitem__(0, clock[0] + s)))
    monkeypatch.setattr(eo, "host_procs", lambda: [Proc(4242, "0::/kubepods/poduid-{}/c".format(chosen(n)), LAUNCH)])
    monkeypatch.setattr(eo.os, "kill", lambda pid, sig: calls.append(("kill", pid, sig)))
    n.calls, n.fake_provider = calls, provider
    return n


def chosen(n) -> str:
    """The replica the seeded choice will take (the test's fakes answer for it alone)."""
    rng = random.Random(2)
    risk_plan(60.0, rng)
    return str(rng.choice([0, 1, 2]))


def test_holder_pause_stops_the_launcher_mid_turn_past_the_lease_then_continues_it(nemesis) -> None:
    import signal
    fault = nemesis.run("holder_pause")
    name = f"eo-bot-{chosen(nemesis)}"
    kinds = [c[0] for c in nemesis.calls]
    assert kinds == ["slow_turn", "kill", "sleep", "kill", "settle"]
    assert nemesis.calls[1] == ("kill", 4242, signal.SIGSTOP) and nemesis.calls[3] == ("kill", 4242, signal.SIGCONT)
    assert nemesis.calls[2][1] == 75.0 and nemesis.calls[0][1] == name and nemesis.calls[0][2] >= 95.0
    assert (fault.kind, fault.ended - fault.started) == ("holder_pause", 75.0)
    assert fault.expect == exactly_once.Expectation("ExactlyOnceAdmission", "False", clears=False, within=10.0)
    assert nemesis.faults == [fault] and name in fault.detail and "pid [4242] stopped" in fault.detail
    # the first copy to the holder, then the redeliveries during the pause to the two other replicas
    queued = sorted(nemesis.fake_provider._queue)
    targets = [nemesis.fake_provider._pinned[q[1]] for q in queued]
    assert targets[0] == ("pod:198.18.0.1" + chosen(nemesis), "198.18.0.1" + chosen(nemesis))
    assert len(queued) == 5 and {t[1] for t in targets[1:]} == {f"198.18.0.{10 + i}" for i in range(3)} - {targets[0][1]}
    assert [q[3] for q in queued] == [0, 1, 2, 3, 4]   # numbered copies, first attempts
    after = [q[0] - fault.started for q in queued[1:]]
    assert all(0 < a < 75.0 for a in after) and sum(a > 60.0 for a in after) >= 2


def test_long_partition_cuts_the_holder_off_from_redis_past_the_lease_then_heals_it(nemesis) -> None:
    fault = nemesis.run("long_partition")
    uid = f"uid-{chosen(nemesis)}"
    assert [c[0] for c in nemesis.calls] == ["slow_turn", "iptables", "in_traffic", "sleep", "iptables", "settle"]
    assert nemesis.calls[1] == ("iptables", uid, "-I", ("10.96.0.9", "198.18.0.50"))   # the Service and the pod
    assert nemesis.calls[4] == ("iptables", uid, "-D", ("10.96.0.9", "198.18.0.50"))
    assert nemesis.calls[2] == ("in_traffic", 75.0)
    assert (fault.kind, fault.left_traffic_after_s, fault.back_after_s) == ("long_partition", 6.5, 0.0)
    assert fault.expect.within == exactly_once.CLAIMS_AT_RISK_BOUND_S and not [c for c in nemesis.calls if c[0] == "kill"]


def test_a_pause_whose_launcher_cannot_be_found_stops_nothing(nemesis, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(eo, "host_procs", lambda: [])
    with pytest.raises(AssertionError, match="no gateway launcher"):
        nemesis.run("holder_pause")
    assert not [c for c in nemesis.calls if c[0] == "kill"] and nemesis.faults == []


def test_a_launcher_gone_during_the_pause_is_not_sent_sigcont(nemesis, monkeypatch: pytest.MonkeyPatch) -> None:
    procs = [[Proc(4242, f"0::/kubepods/poduid-{chosen(nemesis)}/c", LAUNCH)], []]   # gone at the end (liveness)
    monkeypatch.setattr(eo, "host_procs", lambda: procs.pop(0))
    nemesis.run("holder_pause")
    assert [c[0] for c in nemesis.calls].count("kill") == 1


def test_the_slow_turn_waits_for_its_turn_on_the_holder_and_refuses_one_answered_first(monkeypatch) -> None:
    settings = eo.Settings(seed=5)
    provider = eo.Provider(settings, random.Random(1), type("P", (), {"ips": [], "cluster_ip": "10.96.0.5"})(), "t")
    n = eo.Nemesis(FakeCluster(), settings, random.Random(2), provider)
    monkeypatch.setattr(eo.llm_pod, "pod_ip", lambda cluster, namespace: "198.18.0.99")
    looks = iter(range(100))

    def stand_in(base: str, since: int):
        if since >= 10 ** 9:
            return [], 7
        assert since == 7   # only the turns since the message was injected
        # as the stand-in says it: "answered" is whether the model's answer reached the caller (not yet)
        return ([{"msg": "m5-hp000", "started": 1234.5, "answered": False}] if next(looks) >= 2 else []), 8
    monkeypatch.setattr(eo, "_stand_in_turns", stand_in)
    msg, started = n._slow_turn("holder_pause", gateway(1), 105.0)
    assert (msg, started) == ("m5-hp000", 1234.5)
    assert provider.sessions[msg] == "x5-000" and provider._slow[msg] == 105.0
    (entry,) = provider._queue
    assert provider._pinned[entry[1]] == ("pod:198.18.0.11", "198.18.0.11") and "delay=105.0" in entry[5]
    # answered before its turn showed (held 503, say): not on the holder, no fault
    provider.deliveries.append(exactly_once.Delivery("m5-lp001", 0, "pod:198.18.0.11", 1.0, 1.1, 503, said="retry"))
    with pytest.raises(AssertionError, match="answered 503 retry"):
        n._slow_turn("long_partition", gateway(1), 105.0)
