// Wrapper module: builds kubeconform (the schema check tests/sim/test_chart_schemas.py runs over the
// rendered chart, against schemas generated from the oldest and newest supported API servers) from
// the Go module proxy.
module local/kubeconformbuild

go 1.26.0

require github.com/yannh/kubeconform v0.8.0

require (
	github.com/hashicorp/go-cleanhttp v0.5.2 // indirect
	github.com/hashicorp/go-retryablehttp v0.7.8 // indirect
	github.com/santhosh-tekuri/jsonschema/v6 v6.0.2 // indirect
	go.yaml.in/yaml/v2 v2.4.4 // indirect
	golang.org/x/text v0.37.0 // indirect
	k8s.io/kube-openapi v0.0.0-20260603220949-865597e52e25 // indirect
	k8s.io/utils v0.0.0-20260210185600-b8788abfbbc2 // indirect
	sigs.k8s.io/yaml v1.6.0 // indirect
)
