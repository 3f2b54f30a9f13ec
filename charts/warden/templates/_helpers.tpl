{{/* Names and labels. */}}
{{- define "warden.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "warden.controlPlane" -}}
{{- printf "%s-control-plane" (include "warden.fullname" .) -}}
{{- end -}}

{{- define "warden.injector" -}}
{{- printf "%s-injector" (include "warden.fullname" .) -}}
{{- end -}}

{{- define "warden.labels" -}}
app.kubernetes.io/name: warden
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "warden.selector" -}}
app.kubernetes.io/name: warden
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: control-plane
{{- end -}}

{{- define "warden.image" -}}
{{- printf "%s:%s" .image.repository (default .chart.AppVersion .image.tag) -}}
{{- end -}}

{{/* SQLite (the embedded default) when no database URL is given. */}}
{{- define "warden.sqlite" -}}
{{- if and (not .Values.controlPlane.database.url) (not .Values.controlPlane.database.existingSecret) -}}
true
{{- end -}}
{{- end -}}

{{- define "warden.controlPlaneUrl" -}}
{{- default (printf "http://%s.%s.svc:%v" (include "warden.controlPlane" .) .Release.Namespace .Values.controlPlane.service.port) .Values.injector.sidecar.controlPlaneUrl -}}
{{- end -}}

{{/*
The sidecar container, for teams that prefer static manifests to injection:
the same container the injector adds. Put it under `initContainers` (it is a
native sidecar) and include "warden.agentEnv" in the agent's container, with
a `warden-ca` emptyDir volume mounted in both:

  initContainers:
    {{- include "warden.sidecar" (dict "root" . "agentId" "billing-bot" "routes" (list (dict "name" "stripe" "kind" "http" "hosts" (list "api.stripe.com")))) | nindent 4 }}

Arguments: root (the chart context), agentId, routes (a list in the sidecar's
`routes` syntax), keySecret (optional).
*/}}
{{- define "warden.sidecar" -}}
{{- $root := .root -}}
{{- $config := dict
      "agent_id" .agentId
      "control_plane" (dict "url" (include "warden.controlPlaneUrl" $root) "key_env" "WARDEN_AGENT_KEY")
      "admin" (dict "listen" "0.0.0.0:15000")
      "forward_proxy" (dict "listen" "127.0.0.1:15001" "ca_dir" "/var/run/warden/ca")
      "routes" .routes -}}
- name: warden-proxy
  image: {{ include "warden.image" (dict "image" $root.Values.image.proxy "chart" $root.Chart) }}
  imagePullPolicy: {{ $root.Values.image.proxy.pullPolicy }}
  restartPolicy: Always
  env:
    - name: WARDEN_PROXY_CONFIG_YAML
      value: {{ $config | toJson | quote }}
    - name: WARDEN_AGENT_KEY
      valueFrom:
        secretKeyRef:
          name: {{ default $root.Values.injector.sidecar.agentKeySecret .keySecret }}
          key: key
  ports:
    - name: warden-admin
      containerPort: 15000
  startupProbe:
    httpGet: {path: /readyz, port: 15000}
    periodSeconds: 1
    failureThreshold: 60
  readinessProbe:
    httpGet: {path: /readyz, port: 15000}
    periodSeconds: 5
  livenessProbe:
    httpGet: {path: /healthz, port: 15000}
    periodSeconds: 5
  volumeMounts:
    - name: warden-ca
      mountPath: /var/run/warden/ca
  resources:
    requests: {cpu: 50m, memory: 64Mi}
    limits: {memory: 256Mi}
  securityContext:
    runAsNonRoot: true
    runAsUser: 65532
    readOnlyRootFilesystem: true
    allowPrivilegeEscalation: false
    capabilities: {drop: [ALL]}
{{- end -}}

{{/* The agent container's variables: its HTTP(S) through the sidecar, trusting its CA. */}}
{{- define "warden.agentEnv" -}}
- {name: HTTP_PROXY, value: "http://127.0.0.1:15001"}
- {name: HTTPS_PROXY, value: "http://127.0.0.1:15001"}
- {name: NO_PROXY, value: "localhost,127.0.0.1,::1,.svc,.cluster.local"}
- {name: http_proxy, value: "http://127.0.0.1:15001"}
- {name: https_proxy, value: "http://127.0.0.1:15001"}
- {name: no_proxy, value: "localhost,127.0.0.1,::1,.svc,.cluster.local"}
- {name: SSL_CERT_FILE, value: /var/run/warden/ca/ca-bundle.pem}
- {name: REQUESTS_CA_BUNDLE, value: /var/run/warden/ca/ca-bundle.pem}
- {name: NODE_EXTRA_CA_CERTS, value: /var/run/warden/ca/ca.pem}
{{- end -}}

{{/* Refuse what cannot work, at render time. */}}
{{- define "warden.validate" -}}
{{- if and (include "warden.sqlite" .) (or (gt (int .Values.controlPlane.replicas) 1) .Values.autoscaling.enabled) -}}
{{- fail "SQLite (no controlPlane.database.url or existingSecret) runs one replica only: set controlPlane.database to a PostgreSQL URL for replicas > 1 or autoscaling" -}}
{{- end -}}
{{- if and .Values.injector.enabled (not .Values.injector.tls.generate) (or (not .Values.injector.tls.existingSecret) (not .Values.injector.tls.caBundle)) -}}
{{- fail "injector.tls.generate is false: give injector.tls.existingSecret and injector.tls.caBundle" -}}
{{- end -}}
{{- end -}}
