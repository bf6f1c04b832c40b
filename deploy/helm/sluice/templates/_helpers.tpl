{{/* The release's base name: <release>-sluice, or the release name when it contains "sluice". */}}
{{- define "sluice.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The headless service that gives every pod its stable DNS name. */}}
{{- define "sluice.peersService" -}}
{{- printf "%s-peers" (include "sluice.fullname" .) -}}
{{- end -}}

{{/* A pod's stable DNS name: <pod>.<peers service>.<namespace>.svc.<domain>. */}}
{{- define "sluice.podHost" -}}
{{- printf "%s-%d.%s.%s.svc.%s" (include "sluice.fullname" .root) (int .ordinal) (include "sluice.peersService" .root) .root.Release.Namespace .root.Values.cluster.clusterDomain -}}
{{- end -}}

{{/* --peers: the initial members, id=host:raft-port. */}}
{{- define "sluice.peers" -}}
{{- $peers := list -}}
{{- range $i := until (int .Values.cluster.initialMembers) -}}
{{- $peers = append $peers (printf "%s-%d=%s:%d" (include "sluice.fullname" $) $i (include "sluice.podHost" (dict "root" $ "ordinal" $i)) (int $.Values.ports.raft)) -}}
{{- end -}}
{{- join "," $peers -}}
{{- end -}}

{{- define "sluice.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{ include "sluice.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "sluice.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The Secret holding the password, and its key. */}}
{{- define "sluice.passwordSecret" -}}
{{- default (printf "%s-auth" (include "sluice.fullname" .)) .Values.auth.existingSecret -}}
{{- end -}}
{{- define "sluice.passwordKey" -}}
{{- if .Values.auth.existingSecret -}}{{ .Values.auth.existingSecretKey }}{{- else -}}password{{- end -}}
{{- end -}}
