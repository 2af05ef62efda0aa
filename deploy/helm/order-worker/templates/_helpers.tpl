{{/* The release's name for the chart's objects. */}}
{{- define "ow.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "ow.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "ow.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "ow.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* A configuration key as the worker's environment variable. */}}
{{- define "ow.envName" -}}
ORDER_WORKER_{{ . | upper | replace "." "_" }}
{{- end -}}

{{/* Where the Secrets are mounted, read-only. */}}
{{- define "ow.secretDir" -}}/run/secrets/order-worker{{- end -}}

{{/* The settings the chart derives from TLS, SASL and shard values. */}}
{{- define "ow.derivedConfig" -}}
{{- $d := dict -}}
{{- $s := include "ow.secretDir" . -}}
{{- if .Values.tls.mysql.enabled -}}
{{- $_ := set $d "mysql.ssl_mode" .Values.tls.mysql.sslMode -}}
{{- $_ := set $d "mysql.ssl_ca" (printf "%s/mysql-tls/ca.crt" $s) -}}
{{- if .Values.tls.mysql.clientCertificate -}}
{{- $_ := set $d "mysql.ssl_cert" (printf "%s/mysql-tls/tls.crt" $s) -}}
{{- $_ := set $d "mysql.ssl_key" (printf "%s/mysql-tls/tls.key" $s) -}}
{{- end -}}
{{- end -}}
{{- if or .Values.tls.kafka.enabled .Values.sasl.enabled -}}
{{- $proto := "SSL" -}}
{{- if .Values.sasl.enabled -}}{{- $proto = ternary "SASL_SSL" "SASL_PLAINTEXT" .Values.tls.kafka.enabled -}}{{- end -}}
{{- $_ := set $d "kafka.security.protocol" $proto -}}
{{- end -}}
{{- if .Values.tls.kafka.enabled -}}
{{- $_ := set $d "kafka.ssl.ca.location" (printf "%s/kafka-tls/ca.crt" $s) -}}
{{- if .Values.tls.kafka.clientCertificate -}}
{{- $_ := set $d "kafka.ssl.certificate.location" (printf "%s/kafka-tls/tls.crt" $s) -}}
{{- $_ := set $d "kafka.ssl.key.location" (printf "%s/kafka-tls/tls.key" $s) -}}
{{- end -}}
{{- end -}}
{{- if .Values.sasl.enabled -}}
{{- $_ := set $d "kafka.sasl.mechanism" .Values.sasl.mechanism -}}
{{- $_ := set $d "kafka.sasl.username" .Values.sasl.username -}}
{{- end -}}
{{- if .Values.secrets.shardPasswords.keys -}}
{{- $files := list -}}
{{- range .Values.secrets.shardPasswords.keys -}}{{- $files = append $files (printf "%s/shards/%s" $s .) -}}{{- end -}}
{{- $_ := set $d "mysql.shard_password_files" (join "," $files) -}}
{{- end -}}
{{- toYaml $d -}}
{{- end -}}

{{/* Volumes of the Secrets every container of the release reads. */}}
{{- define "ow.tlsVolumes" -}}
{{- if .Values.tls.mysql.enabled }}
- name: mysql-tls
  secret:
    secretName: {{ .Values.tls.mysql.existingSecret }}
    defaultMode: 0440
{{- end }}
{{- if .Values.tls.kafka.enabled }}
- name: kafka-tls
  secret:
    secretName: {{ .Values.tls.kafka.existingSecret }}
    defaultMode: 0440
{{- end }}
{{- if .Values.sasl.enabled }}
- name: kafka-sasl
  secret:
    secretName: {{ .Values.sasl.existingSecret }}
    defaultMode: 0440
    items:
      - key: sasl.conf
        path: sasl.conf
{{- end }}
{{- if .Values.secrets.shardPasswords.keys }}
- name: shard-passwords
  secret:
    secretName: {{ .Values.secrets.shardPasswords.existingSecret }}
    defaultMode: 0440
{{- end }}
{{- end -}}

{{- define "ow.tlsMounts" -}}
{{- $s := include "ow.secretDir" . -}}
{{- if .Values.tls.mysql.enabled }}
- name: mysql-tls
  mountPath: {{ $s }}/mysql-tls
  readOnly: true
{{- end }}
{{- if .Values.tls.kafka.enabled }}
- name: kafka-tls
  mountPath: {{ $s }}/kafka-tls
  readOnly: true
{{- end }}
{{- if .Values.sasl.enabled }}
- name: kafka-sasl
  mountPath: {{ $s }}/kafka-sasl
  readOnly: true
{{- end }}
{{- if .Values.secrets.shardPasswords.keys }}
- name: shard-passwords
  mountPath: {{ $s }}/shards
  readOnly: true
{{- end }}
{{- end -}}

{{/* The worker's command line: SASL's password comes in a config file. */}}
{{- define "ow.args" -}}
- {{ .cmd }}
{{- if .root.Values.sasl.enabled }}
- --config
- {{ include "ow.secretDir" .root }}/kafka-sasl/sasl.conf
{{- end }}
{{- end -}}

{{/* A value as the worker reads it: YAML numbers arrive as floats, and a
large one would print in exponent form. */}}
{{- define "ow.str" -}}
{{- if kindIs "float64" . -}}{{ int64 . }}{{- else -}}{{ toString . }}{{- end -}}
{{- end -}}

{{/* A pod's labels: its selector's, and the chart's others. */}}
{{- define "ow.podLabels" -}}
{{ include "ow.selector" . }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
{{- end -}}
