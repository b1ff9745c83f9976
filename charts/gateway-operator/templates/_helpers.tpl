{{- define "gateway-operator.fullname" -}}
{{- default .Release.Name .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gateway-operator.labels" -}}
app.kubernetes.io/name: gateway-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{- define "gateway-operator.selectorLabels" -}}
app.kubernetes.io/name: gateway-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* repository@digest when a digest is set (the tag is then ignored), else repository:tag */}}
{{- define "gateway-operator.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* topologySpreadConstraints as YAML list; one without labelSelector selects the operator's pods */}}
{{- define "gateway-operator.topologySpreadConstraints" -}}
{{- $constraints := list -}}
{{- range .Values.topologySpreadConstraints -}}
{{- $c := deepCopy . -}}
{{- if not (hasKey $c "labelSelector") -}}
{{- $_ := set $c "labelSelector" (dict "matchLabels" (include "gateway-operator.selectorLabels" $ | fromYaml)) -}}
{{- end -}}
{{- $constraints = append $constraints $c -}}
{{- end -}}
{{- toYaml $constraints -}}
{{- end -}}

{{- define "gateway-operator.serviceAccountName" -}}
{{- default (include "gateway-operator.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* The permissions the operator uses, and no more (tests/node/test_rbac.py proves each verb is
used and nothing is refused). Server-side apply (kube.apply) is a PATCH; when the object is
missing the API server also checks `create`. */}}
{{- define "gateway-operator.rules" -}}
# kopf's watch of the resource (handlers.py)
- apiGroups: [gateway-operator.dev]
  resources: [gatewaydeployments]
  verbs: [list, watch]
# conditions and status (kube.patch_status)
- apiGroups: [gateway-operator.dev]
  resources: [gatewaydeployments/status]
  verbs: [patch]
# owned objects: read before applying (kube.get), server-side apply, watched for drift (handlers.py)
- apiGroups: [apps]
  resources: [deployments]
  verbs: [get, list, watch, create, patch]
- apiGroups: [""]
  resources: [configmaps, services]
  verbs: [get, list, watch, create, patch]
# gateway pods: kopf's index and watch, the managed Redis pod (kube.pods), stale replica restart (kube.delete_pod)
- apiGroups: [""]
  resources: [pods]
  verbs: [list, watch, delete]
# the gateway pods' readiness gate (spec.health.readinessGate: kube.set_pod_condition)
- apiGroups: [""]
  resources: [pods/status]
  verbs: [patch]
# Secrets named in the spec (kube.secret_value) and the generated ones (kube.create_if_absent);
# with rbac.watchSecrets listed and watched too, for their versions and controllers only (no value
# is kept): a full pass then reads a Secret only after it changed, and none to know a generated one
# is there (handlers.secret_changed)
- apiGroups: [""]
  resources: [secrets]
  {{- if .Values.rbac.watchSecrets }}
  verbs: [get, list, watch, create]
  {{- else }}
  verbs: [get, create]
  {{- end }}
# applied like the objects above, not watched
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [get, create, patch]
# the managed Redis's and the gateway pods' (spec.networkPolicy; the latter removed with the field)
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, create, patch, delete]
# the PodDisruptionBudget of two replicas or more: applied and watched like the objects above (a
# full pass reads none back while the watch shows it unchanged), removed when replicas drop to one
# (kube.delete_if_present)
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, list, watch, create, patch, delete]
# spec.expose: the Ingress and HTTPRoute, applied, read for their address, removed when the spec
# drops them or a host is claimed by someone older; every Ingress and HTTPRoute is watched for the
# hosts it claims (handlers.py host claims); a parent Gateway that accepted the route is read for its address
- apiGroups: [networking.k8s.io]
  resources: [ingresses]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [gateway.networking.k8s.io]
  resources: [httproutes]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [gateway.networking.k8s.io]
  resources: [gateways]
  verbs: [get]
# spec.autoscaling: the HorizontalPodAutoscaler against the GatewayDeployment's /scale, and
# spec.podMonitor: the PodMonitor of the gateway pods' /metrics (where prometheus-operator's CRD is
# installed); applied, removed with the fields (kube.delete_if_present), not watched
- apiGroups: [autoscaling]
  resources: [horizontalpodautoscalers]
  verbs: [get, create, patch, delete]
- apiGroups: [monitoring.coreos.com]
  resources: [podmonitors]
  verbs: [get, create, patch, delete]
# Events on the resource (kopf.event posts core v1 Events)
- apiGroups: [""]
  resources: [events]
  verbs: [create]
{{- end -}}
