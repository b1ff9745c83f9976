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

{{- define "gateway-operator.serviceAccountName" -}}
{{- default (include "gateway-operator.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* The permissions the operator uses, and no more. */}}
{{- define "gateway-operator.rules" -}}
- apiGroups: [gateway-operator.dev]
  resources: [gatewaydeployments]
  verbs: [get, list, watch]
- apiGroups: [gateway-operator.dev]
  resources: [gatewaydeployments/status]
  verbs: [get, patch]
- apiGroups: [apps]
  resources: [deployments]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [configmaps, services]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, delete]
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, create]
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [get, create, patch]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, create, patch, delete]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, create, patch, delete]
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch]
{{- end -}}
