"""gateway-operator: runs and guards replicas of the PraisonAI bot gateway. One folder a layer,
lowest first: api/ (the GatewayDeployment API and its rules), core/ (the pure core that decides),
clients/ (the I/O to the API server, the replicas and Redis), loop/ (kopf's wiring and one task per
GatewayDeployment); cli.py and offline.py on top; pod/ is the code the gateway pods run.
docs/architecture.md walks the tree."""

#: the release: the operator's and its chart's (charts/gateway-operator/Chart.yaml ``version`` and
#: ``appVersion``), written once here; pyproject.toml, the chart and CHANGELOG.md follow it
#: (tests/unit/test_release_metadata.py). ``gateway-operator version`` prints it.
__version__ = "0.1.0"
