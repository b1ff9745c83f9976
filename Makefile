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

# prometheus, promtool and the prometheus-operator CRDs, for tests/sim/test_monitoring.py
monitoring-binaries:
	@hack/build-binaries.sh --monitoring >/dev/null
.PHONY: monitoring-binaries

# The local control plane with a REAL node (hack/node.sh: containerd, runc, CNI bridge with pods in
# 198.18.0.0/16 and Services in 198.19.0.0/16, kubelet, kube-scheduler, kube-proxy, CoreDNS, a
# hostPath provisioner), running the images of `make images`. Root; one node per host.
cluster-up: system-deps venv binaries node-binaries images
	@GWOP_NODE=1 hack/cluster.sh up

# Stops the control plane and its node, removing what they created (processes by pid, mounts,
# netns, the bridge, iptables chains, cgroups, sysctls put back).
cluster-down:
	@hack/cluster.sh down

# tests/unit (no cluster) and tests/sim (control planes with a simulated node, started and
# stopped by the test session), beside tests/node (the real node), with real redis-servers;
# tests/node/test_node.py runs `make demo` on a real node (.cluster/node-demo) and tests its real
# pods, then the other real-node modules share one (.cluster/node-session) (root; without root
# they skip in one line, under CI they fail). PYTEST_ARGS=tests/unit runs one folder.
# GWOP_TEST_KUBECONFIG=<path> runs the integration suite against an existing cluster instead.
# hack/test.sh runs tests/node beside tests/unit + tests/sim (two pytest runs, about the time of the
# longer one), each printing its slowest tests; with PYTEST_ARGS, one pytest run with them.
test: system-deps venv test-binaries
	PY=$(PY) hack/test.sh $(PYTEST_ARGS)

# The release (issue 55, docs/releasing.md): the operator and gateway images as OCI image indexes
# (PLATFORMS, default linux/amd64 linux/arm64: a foreign one builds under qemu-user), their SPDX
# SBOMs, the chart with its default image by digest, all pushed to REGISTRY and signed with cosign
# (COSIGN_KEY, or keyless). The tree's version must be VERSION. hack/release.sh says the rest.
release:
	@hack/build-binaries.sh --release-only >/dev/null
	@hack/release.sh "$(VERSION)" "$(REGISTRY)"
.PHONY: release

# every Go build `make test` uses, in one hack/build-binaries.sh run (its lanes build side by side)
test-binaries:
	@hack/build-binaries.sh --monitoring --oldest --node --release >/dev/null
.PHONY: test-binaries

# kube-apiserver, kube-controller-manager and kube-scheduler at the OLDEST supported Kubernetes
# (hack/versions.env KUBE_OLDEST_VERSION, from hack/k8s-oldest) as <name>-<version>; the plain names
# stay KUBE_VERSION's. tests/sim/test_oldest_end.py (part of `make test`) and `make test-oldest` use them.
oldest-binaries:
	@hack/build-binaries.sh --oldest >/dev/null
.PHONY: oldest-binaries

# The oldest supported end in full: the session's control plane (.cluster/oldest) at
# KUBE_OLDEST_VERSION: the admission suite (CRD install, every CEL rule and its message), the
# control-plane smoke tests, the chart (its kubeVersion, every template, its ValidatingAdmissionPolicies,
# install/upgrade/uninstall) and operator tests that reconcile GatewayDeployments to Ready, then
# the slice `make test` runs (tests/sim/test_oldest_end.py). PYTEST_ARGS adds to it.
OLDEST_TESTS := tests/sim/test_crd_admission.py tests/sim/test_control_plane.py tests/sim/test_chart.py \
	tests/sim/test_expose.py tests/sim/test_oldest_end.py \
	tests/sim/test_tenancy.py::test_the_admission_policy_refuses_with_the_operators_message \
	tests/sim/test_tenancy.py::test_a_pod_the_api_server_refuses_reaches_the_resource \
	tests/sim/test_tenancy.py::test_the_gateway_network_policy_is_written_and_goes_with_the_field
# The release matrix (issue 32): the real-gateway suite against each praisonai-bot release of
# gateway_operator/core/compat.py TESTED_RELEASES (RELEASES=..., MATRIX_ARGS=..., MATRIX_JSON=...).
# CI runs its release_matrix slice against every release but the venv's own.
release-matrix: system-deps venv
	hack/release-matrix.sh
.PHONY: release-matrix

test-oldest: system-deps venv binaries monitoring-binaries oldest-binaries
	GWOP_KUBE_VERSION=$$(sed -n 's/^KUBE_OLDEST_VERSION=//p' hack/versions.env) GWOP_TEST_CLUSTER_DIR=.cluster/oldest \
	  $(PY) -m pytest $(OLDEST_TESTS) --deselect tests/sim/test_control_plane.py::test_server_reports_real_version \
	  $(PYTEST_ARGS)
.PHONY: test-oldest

# The operator upgrade on the real node (tests/node/test_upgrade.py, issue 22): `helm upgrade` from an
# earlier commit's chart and operator image (built from git history) to this tree, six
# GatewayDeployments under a webhook stream. Root; about 20 minutes, so not part of `make test`.
test-upgrade: system-deps venv binaries node-binaries images
	GWOP_UPGRADE_TEST=1 $(PY) -m pytest tests/node/test_upgrade.py $(PYTEST_ARGS)
.PHONY: test-upgrade

# The full fuzz run (issue 7): 500+ seeded adversarial GatewayDeployments through the real API
# server and the operator, on its own control plane (.cluster/fuzz). FUZZ_SEED, FUZZ_CASES,
# FUZZ_BATCH; FUZZ_JSON=<file> writes the summary there. `make test` runs a small slice.
fuzz: system-deps venv binaries
	$(PY) hack/fuzz.py

# The exactly-once checker (issue 18) on the `make demo` sandbox (started when it is not up):
# deliveries fanned out to pod IPs, the Service and the edge with redeliveries, a seeded nemesis
# (1 SQLite replica -> 3 on Redis, pod SIGKILL, rolling update, scaling, Redis paused / flushed /
# restarted / its persistence flipped, the operator's leader killed), the LLM stand-in's turn
# records and a condition watch, classified by
# tests/harness/exactly_once.py. VERIFY_SEED, VERIFY_JSON=<file>, VERIFY_PNG=<file>,
# VERIFY_MESSAGES, VERIFY_COPIES, VERIFY_FAULTS; exit 1 when a target is missed.
verify-exactly-once: system-deps venv binaries node-binaries images
	$(PY) hack/verify-exactly-once.py
.PHONY: verify-exactly-once

# The autoscaling proof on the real node: Prometheus, prometheus-adapter and the HPA controller scale a
# GatewayDeployment out under a burst of slow turns and back in, the checker's deliveries running through
verify-autoscaling: system-deps venv binaries node-binaries images
	$(PY) hack/verify-autoscaling.py
.PHONY: verify-autoscaling

demo:  # hack/demo.sh installs what is missing itself, saying so, and times it
	@hack/demo.sh

demo-down:
	@hack/demo.sh down

# The CRD is generated from operator/gateway_operator/api/crd.py; both copies are checked by
# tests/sim/test_crd_admission.py. So is the chart's tenancy admission policy (tenancy.RULES).
crds: venv
	$(VENV)/bin/gateway-operator crd > crds/gatewaydeployments.yaml
	cp crds/gatewaydeployments.yaml charts/gateway-operator/crds/gatewaydeployments.yaml
	$(VENV)/bin/gateway-operator tenancy-policy > charts/gateway-operator/templates/tenancy-policy.yaml
.PHONY: crds

# The GatewayDeployment reference table of docs/reference.md, generated from the CRD (whose fields are
# declared once in operator/gateway_operator/api/__init__.py); tests/unit/test_api_fields.py fails when the
# committed one is stale.
api-reference: venv
	$(PY) hack/api-reference.py
.PHONY: api-reference

# The values table of charts/gateway-operator/README.md, generated from the chart's
# values.schema.json and values.yaml; tests/sim/test_chart.py fails when the committed one is stale.
chart-readme: venv
	$(PY) hack/chart-readme.py
.PHONY: chart-readme

# The node's container images (issue 8): base, operator, gateway, redis, pause as OCI archives in
# $(GWOP_CACHE)/images (default ~/.cache/gateway-operator/images), built with mmdebstrap + buildah
# and reused while their inputs are unchanged; images.txt there lists them. Needs root.
# tests/node/test_images.py (part of `make test`) checks them as a user of them would.
images:
	@hack/images.sh
.PHONY: images

# The real node's kubelet, kube-proxy, kube-scheduler, CoreDNS and containerd (built from Go modules, cached)
node-binaries:
	@hack/build-binaries.sh --node >/dev/null
.PHONY: node-binaries

# docs/img/dashboard.png: the Grafana dashboard's panels evaluated by a real Prometheus over the
# live scenario of tests/sim/test_monitoring.py (on its own control plane, .cluster/monitoring).
dashboard-png: system-deps venv binaries monitoring-binaries
	GWOP_DASHBOARD_PNG=docs/img/dashboard.png $(PY) -m pytest -q tests/sim/test_monitoring.py -k picture
.PHONY: dashboard-png

# The golden pod templates (tests/golden/, one file per example): written again from what render
# makes of examples/*.yaml. Review the diff: every GatewayDeployment like a changed one rolls when
# the new operator is installed (docs/upgrades.md, "Rollouts per release").
golden: venv
	GOLDEN_UPDATE=1 $(PY) -m pytest -q tests/unit/test_golden.py
.PHONY: golden
