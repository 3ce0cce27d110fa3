{{/* The release's resource names: the release name, or "ingot" inside it once. */}}
{{- define "ingot.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "ingot.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "ingot.labels" -}}
{{ include "ingot.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Whether a controller group is enabled: include "ingot.enabled" (list . "pools") */}}
{{- define "ingot.enabled" -}}
{{- if has (index . 1) (index . 0).Values.controllers -}}true{{- end -}}
{{- end -}}

{{/* Whether the power action API is served: the seeder group with seeder.powerApi.enabled. */}}
{{- define "ingot.powerApi" -}}
{{- if and (include "ingot.enabled" (list . "seeder")) .Values.seeder.powerApi.enabled -}}true{{- end -}}
{{- end -}}

{{/* Whether ingot's boot server runs: provisioning, with the URL servers reach it at. */}}
{{- define "ingot.bootServer" -}}
{{- if and (include "ingot.enabled" (list . "provisioning")) .Values.provisioning.boot.url -}}true{{- end -}}
{{- end -}}

{{/* Whether the Rufio controllers run: rufio, or seeder or fencing, which start them too. */}}
{{- define "ingot.rufio" -}}
{{- if or (include "ingot.enabled" (list . "rufio")) (include "ingot.enabled" (list . "seeder")) (include "ingot.enabled" (list . "fencing")) -}}true{{- end -}}
{{- end -}}

{{/* Whether the Rufio controllers trust a BMC CA bundle: they run, with rufio.bmcCaBundle's Secret or ConfigMap. */}}
{{- define "ingot.bmcCa" -}}
{{- if and (include "ingot.rufio" .) (or .Values.rufio.bmcCaBundle.secret .Values.rufio.bmcCaBundle.configMap) -}}true{{- end -}}
{{- end -}}


{{/* Whether the push events receiver runs: the seeder group with seeder.events.push.enabled. */}}
{{- define "ingot.eventsPush" -}}
{{- if and (include "ingot.enabled" (list . "seeder")) .Values.seeder.events.push.enabled -}}true{{- end -}}
{{- end -}}

{{/* The Secret holding the push events key: the one named, or the chart's own. */}}
{{- define "ingot.eventsKeySecret" -}}
{{- .Values.seeder.events.push.keySecret.name | default (printf "%s-push-events-key" (include "ingot.fullname" .)) -}}
{{- end -}}
