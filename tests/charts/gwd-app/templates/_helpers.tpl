{{- define "gwd-app.name" -}}
{{- default .Release.Name .Values.name -}}
{{- end -}}
