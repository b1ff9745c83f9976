"""Every manifest in examples/ (the ones the README uses) applied to the real API server."""
from __future__ import annotations

import pytest

from harness.cluster import REPO, Cluster
from harness.operator import install_crd


EXPECTED = {  # file -> what `kubectl apply` does with it
    "redis-secret.yaml": "accepted",
    "gateway-redis.yaml": "accepted",
    "gateway-managed-redis.yaml": "accepted",
    "gateway-single.yaml": "accepted",
    "gateway-warned.yaml": "accepted",
    "gateway-refused.yaml": "refused",
    "gateway-hpa.yaml": "accepted",
    "gateway-autoscaling.yaml": "accepted",
    "bot-tokens.yaml": "accepted",
    "gateway-own-redis.yaml": "accepted",
    "own-redis-secrets.yaml": "accepted",
}


def test_every_example_is_covered() -> None:
    assert sorted(p.name for p in (REPO / "examples").glob("*.yaml")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_applies_as_documented(cluster: Cluster, namespace: str, name: str) -> None:
    install_crd(cluster)
    result = cluster.kubectl("apply", "-n", namespace, "-f", str(REPO / "examples" / name), check=False)
    if EXPECTED[name] == "accepted":
        assert result.returncode == 0, result.stderr
    else:
        assert result.returncode != 0
        assert "can run the agent twice" in result.stderr
