{{/*
The labels Helm's conventions add to every object's metadata, on top of
the app.kubernetes.io/name and component labels manifests/ sets. Never in
a selector or a pod template: those stay as manifests/ has them, so that
an install moved from kustomize to Helm keeps its selectors (immutable).
*/}}
{{- define "kerf.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/*
kerf.image renders an image reference from a component's image values
(repository, tag, digest); an empty tag is the chart's appVersion. A
digest (sha256:...) pins the image: the reference is repository@digest,
which no push of the same tag can change.
*/}}
{{- define "kerf.image" -}}
{{- if .image.digest -}}
{{ .image.repository }}@{{ .image.digest }}
{{- else -}}
{{- $tag := .image.tag | default .chart.AppVersion -}}
{{ .image.repository }}:{{ $tag }}
{{- end -}}
{{- end -}}
