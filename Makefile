# The two commands of the README: `make demo` (sandbox) and `make test`.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: system-deps venv binaries cluster-up cluster-down test fuzz demo demo-down

system-deps:
	@hack/system-deps.sh

venv:
	@hack/venv.sh

binaries:
	@hack/build-binaries.sh >/dev/null

# prometheus, promtool and the prometheus-operator CRDs, for tests/test_monitoring.py
monitoring-binaries:
	@hack/build-binaries.sh --monitoring >/dev/null
.PHONY: monitoring-binaries

# kube-scheduler and kwok for bench/operator_bench.py (tests/test_bench.py runs a small one)
bench-binaries:
	@hack/build-binaries.sh --bench >/dev/null
.PHONY: bench-binaries

cluster-up: system-deps venv binaries
	@hack/cluster.sh up

cluster-down:
	@hack/cluster.sh down

# Unit tests, then the integration suite on its own local control plane (started and
# stopped by the test session) and real redis-servers. GWOP_TEST_KUBECONFIG=<path> runs
# the integration suite against an existing cluster instead.
test: system-deps venv binaries monitoring-binaries bench-binaries
	$(PY) -m pytest $(PYTEST_ARGS)

# The full fuzz run (issue 7): 500+ seeded adversarial GatewayDeployments through the real API
# server and the operator, on its own control plane (.cluster/fuzz). FUZZ_SEED, FUZZ_CASES,
# FUZZ_BATCH; FUZZ_JSON=<file> writes the summary there. `make test` runs a small slice.
fuzz: system-deps venv binaries
	$(PY) hack/fuzz.py

demo:  # hack/demo.sh installs what is missing itself, saying so, and times it
	@hack/demo.sh

demo-down:
	@hack/demo.sh down

# The CRD is generated from operator/gateway_operator/crd.py; both copies are checked by
# tests/test_crd_admission.py.
crds: venv
	$(VENV)/bin/gateway-operator crd > crds/gatewaydeployments.yaml
	cp crds/gatewaydeployments.yaml charts/gateway-operator/crds/gatewaydeployments.yaml
.PHONY: crds

# The values table of charts/gateway-operator/README.md, generated from the chart's
# values.schema.json and values.yaml; tests/test_chart.py fails when the committed one is stale.
chart-readme: venv
	$(PY) hack/chart-readme.py
.PHONY: chart-readme

# The node's container images (issue 8): base, operator, gateway, redis, pause as OCI archives in
# $(GWOP_CACHE)/images (default ~/.cache/gateway-operator/images), built with mmdebstrap + buildah
# and reused while their inputs are unchanged; images.txt there lists them. Needs root.
# `pytest -m images tests/test_images.py` checks them (not part of `make test`).
images:
	@hack/images.sh
.PHONY: images

# A REAL node (issue 8 step 2, opt-in): containerd, runc, CNI bridge (pods 198.18.0.0/16,
# Services 198.19.0.0/16), kube-scheduler, kubelet and kube-proxy built from the pinned module
# (hack/build-binaries.sh --node), images from `make images`. Root. The control plane in
# GWOP_CLUSTER_DIR must run without the kubelet stand-in (node-up starts one so if none runs).
# `pytest -m node tests/test_node.py` is the smoke test (not part of `make test`).
node-up: system-deps venv binaries
	@hack/node.sh up

node-down:
	@hack/node.sh down
.PHONY: node-up node-down

# docs/img/dashboard.png: the Grafana dashboard's panels evaluated by a real Prometheus over the
# live scenario of tests/test_monitoring.py (on its own control plane, .cluster/monitoring).
dashboard-png: system-deps venv binaries monitoring-binaries
	GWOP_DASHBOARD_PNG=docs/img/dashboard.png $(PY) -m pytest -q tests/test_monitoring.py -k picture
.PHONY: dashboard-png
