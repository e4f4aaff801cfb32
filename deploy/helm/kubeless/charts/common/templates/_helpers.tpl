{{/*
Name of a service's objects: the release name joined with the subchart name, cut to the 63 characters Kubernetes allows.
*/}}
{{- define "common.fullname" -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "common.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "common.labels" -}}
{{ include "common.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | default .Chart.Version | quote }}
app.kubernetes.io/part-of: kubeless
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/*
An image reference from an image block (registry, repository, tag, digest) with the global
fallbacks: registry from the block or global.imageRegistry; a digest wins over any tag; the tag
from the block, global.imageTag or the chart's appVersion.
Call with (dict "image" .Values.image "ctx" .).
*/}}
{{- define "common.imageRef" -}}
{{- $ctx := .ctx -}}
{{- $image := .image -}}
{{- $registry := $image.registry | default $ctx.Values.global.imageRegistry | default "" -}}
{{- $name := $image.repository -}}
{{- if $registry -}}
{{- $name = printf "%s/%s" (trimSuffix "/" $registry) $name -}}
{{- end -}}
{{- if $image.digest -}}
{{- printf "%s@%s" $name $image.digest -}}
{{- else -}}
{{- printf "%s:%s" $name ($image.tag | default $ctx.Values.global.imageTag | default $ctx.Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* The service's own image. */}}
{{- define "common.image" -}}
{{- include "common.imageRef" (dict "image" .Values.image "ctx" .) -}}
{{- end -}}

{{/* Pull policy: the subchart's image.pullPolicy, else global.imagePullPolicy. */}}
{{- define "common.imagePullPolicy" -}}
{{- .Values.image.pullPolicy | default .Values.global.imagePullPolicy | default "IfNotPresent" -}}
{{- end -}}

{{/* Pull secrets: the global list, then the subchart's own. */}}
{{- define "common.imagePullSecrets" -}}
{{- $secrets := concat (.Values.global.imagePullSecrets | default list) (.Values.imagePullSecrets | default list) -}}
{{- with $secrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
Namespace-scoped install: global.functionsNamespace set. Every rule of a service then goes into a
Role in that namespace (no ClusterRole, no cluster-wide write) and the services watch only it.
*/}}
{{- define "common.namespaced" -}}
{{- if .Values.global.functionsNamespace }}true{{ end -}}
{{- end -}}

{{/*
A service's RBAC: the rules (YAML text with a comment per rule) in a ClusterRole bound
cluster-wide, or, in a namespace-scoped install, in a Role bound in functionsNamespace.
Call with (dict "ctx" . "rules" (include "<chart>.rules" .) "suffix" "").
*/}}
{{- define "common.rbac" -}}
{{- $ctx := .ctx -}}
{{- $name := printf "%s%s" (include "common.fullname" $ctx) (.suffix | default "") -}}
{{- $namespaced := include "common.namespaced" $ctx -}}
{{- $kind := ternary "Role" "ClusterRole" (eq $namespaced "true") -}}
apiVersion: rbac.authorization.k8s.io/v1
kind: {{ $kind }}
metadata:
  name: {{ $name }}
  {{- if $namespaced }}
  namespace: {{ $ctx.Values.global.functionsNamespace }}
  {{- end }}
  labels:
    {{- include "common.labels" $ctx | nindent 4 }}
rules:
{{ .rules | trim | indent 2 }}
{{- if not .noBinding }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: {{ ternary "RoleBinding" "ClusterRoleBinding" (eq $namespaced "true") }}
metadata:
  name: {{ $name }}
  {{- if $namespaced }}
  namespace: {{ $ctx.Values.global.functionsNamespace }}
  {{- end }}
  labels:
    {{- include "common.labels" $ctx | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: {{ $kind }}
  name: {{ $name }}
subjects:
  - kind: ServiceAccount
    name: {{ include "common.fullname" $ctx }}
    namespace: {{ $ctx.Release.Namespace }}
{{- end }}
{{- end -}}

{{/*
A Role and RoleBinding in the release namespace: leader-election Leases and whatever else a
service reads from its own namespace. Never a ClusterRole: the Lease lives next to the pods.
Call with (dict "ctx" . "rules" (include "<chart>.ownNamespaceRules" .)).
*/}}
{{- define "common.releaseNamespaceRole" -}}
{{- $ctx := .ctx -}}
{{- $name := printf "%s-%s" (include "common.fullname" $ctx) "own-namespace" -}}
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ $name }}
  namespace: {{ $ctx.Release.Namespace }}
  labels:
    {{- include "common.labels" $ctx | nindent 4 }}
rules:
{{ .rules | trim | indent 2 }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ $name }}
  namespace: {{ $ctx.Release.Namespace }}
  labels:
    {{- include "common.labels" $ctx | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ $name }}
subjects:
  - kind: ServiceAccount
    name: {{ include "common.fullname" $ctx }}
    namespace: {{ $ctx.Release.Namespace }}
{{- end -}}

{{/* The leader-election rule (Lease in the release namespace). */}}
{{- define "common.leaseRule" -}}
# Leader election: create the Lease once, read it, renew it or take it over.
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["get", "create", "update"]
{{- end -}}

{{- define "common.serviceAccount" -}}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ include "common.fullname" . }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "common.labels" . | nindent 4 }}
{{- end -}}

{{/*
The address a service listens on: its pod's (from the POD_IP env var the Deployment sets) with
global.bindPodIP, else every interface.
*/}}
{{- define "common.bindAddress" -}}
{{- if .Values.global.bindPodIP -}}$(POD_IP){{- else -}}0.0.0.0{{- end -}}
{{- end -}}

{{/*
The Deployment of a service binary. Every service uses the scaffold in shared/service, so the
admin port, probes, env and security context are the same; .Values.extraEnv and .Values.args add the rest.
*/}}
{{- define "common.deployment" -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "common.fullname" . }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "common.labels" . | nindent 4 }}
spec:
  replicas: {{ .Values.replicas | default 1 }}
  selector:
    matchLabels:
      {{- include "common.selectorLabels" . | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "common.selectorLabels" . | nindent 8 }}
      annotations:
        prometheus.io/scrape: "true"
        prometheus.io/port: "8081"
        prometheus.io/path: /metrics
    spec:
      serviceAccountName: {{ include "common.fullname" . }}
      {{- include "common.imagePullSecrets" . | nindent 6 }}
      # PodSecurity "restricted": non-root numeric user (65532, the images' user), RuntimeDefault seccomp.
      securityContext:
        runAsNonRoot: true
        runAsUser: 65532
        runAsGroup: 65532
        fsGroup: 65532
        seccompProfile:
          type: RuntimeDefault
      {{- with .Values.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      containers:
        - name: {{ .Chart.Name }}
          image: {{ include "common.image" . | quote }}
          imagePullPolicy: {{ include "common.imagePullPolicy" . }}
          {{- with .Values.args }}
          args:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          env:
            - name: KUBELESS_LOG_LEVEL
              value: {{ .Values.global.logLevel | quote }}
            - name: KUBELESS_LOG_FORMAT
              value: {{ .Values.global.logFormat | quote }}
            {{- if .Values.global.bindPodIP }}
            - name: POD_IP
              valueFrom:
                fieldRef:
                  fieldPath: status.podIP
            {{- end }}
            - name: KUBELESS_ADMIN_ADDR
              value: {{ include "common.bindAddress" . }}:8081
            - name: KUBELESS_WATCH_NAMESPACE
              value: {{ .Values.global.functionsNamespace | quote }}
            - name: OTEL_EXPORTER_OTLP_ENDPOINT
              value: {{ .Values.global.otlpEndpoint | quote }}
            - name: KUBELESS_ACTIVITY_INTERVAL
              value: {{ .Values.global.activityInterval | default "10s" | quote }}
            - name: KUBELESS_LEADER_ELECT
              value: {{ gt (int (.Values.replicas | default 1)) 1 | quote }}
            - name: POD_NAME
              valueFrom:
                fieldRef:
                  fieldPath: metadata.name
            - name: POD_NAMESPACE
              valueFrom:
                fieldRef:
                  fieldPath: metadata.namespace
            {{- with .Values.extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          ports:
            - name: admin
              containerPort: 8081
          {{- $probes := .Values.global.probes }}
          startupProbe:
            httpGet:
              path: /healthz
              port: admin
            periodSeconds: 2
            failureThreshold: {{ $probes.startupFailureThreshold }}
          livenessProbe:
            httpGet:
              path: /healthz
              port: admin
            periodSeconds: {{ $probes.periodSeconds }}
            timeoutSeconds: {{ $probes.timeoutSeconds }}
            failureThreshold: {{ $probes.failureThreshold }}
          readinessProbe:
            httpGet:
              path: /readyz
              port: admin
            periodSeconds: {{ $probes.periodSeconds }}
            timeoutSeconds: {{ $probes.timeoutSeconds }}
          resources:
            {{- toYaml .Values.resources | nindent 12 }}
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            runAsNonRoot: true
            capabilities:
              drop: ["ALL"]
{{- end -}}

{{/*
The optional objects every service gets from global values: a PodDisruptionBudget, a
NetworkPolicy (admin port from the release namespace and global.networkPolicy.metricsFrom; the
ports in .openPorts from anywhere) and, for the Prometheus Operator, a metrics Service with a
ServiceMonitor. Call with (dict "ctx" . "openPorts" (list)).
*/}}
{{- define "common.extras" -}}
{{- $ctx := .ctx -}}
{{- $g := $ctx.Values.global -}}
{{- $name := include "common.fullname" $ctx -}}
{{- if $g.podDisruptionBudget.enabled }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ $name }}
  namespace: {{ $ctx.Release.Namespace }}
  labels:
    {{- include "common.labels" $ctx | nindent 4 }}
spec:
  maxUnavailable: {{ $g.podDisruptionBudget.maxUnavailable }}
  selector:
    matchLabels:
      {{- include "common.selectorLabels" $ctx | nindent 6 }}
{{- end }}
{{- if $g.networkPolicy.enabled }}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: {{ $name }}
  namespace: {{ $ctx.Release.Namespace }}
  labels:
    {{- include "common.labels" $ctx | nindent 4 }}
spec:
  podSelector:
    matchLabels:
      {{- include "common.selectorLabels" $ctx | nindent 6 }}
  # Ingress only: the services call the API server, brokers and functions (egress stays open).
  policyTypes: ["Ingress"]
  ingress:
    # Admin port (/metrics, probes): pods of the release namespace and the configured scrapers.
    - ports:
        - port: admin
          protocol: TCP
      from:
        - podSelector: {}
        {{- with $g.networkPolicy.metricsFrom }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    {{- range .openPorts }}
    # Served to clients anywhere (e.g. the HTTP gateway).
    - ports:
        - port: {{ . }}
          protocol: TCP
    {{- end }}
{{- end }}
{{- if $g.serviceMonitor.enabled }}
---
# Headless Service for the admin port, which the ServiceMonitor selects.
apiVersion: v1
kind: Service
metadata:
  name: {{ $name }}-metrics
  namespace: {{ $ctx.Release.Namespace }}
  labels:
    {{- include "common.labels" $ctx | nindent 4 }}
    app.kubernetes.io/component: metrics
spec:
  clusterIP: None
  selector:
    {{- include "common.selectorLabels" $ctx | nindent 4 }}
  ports:
    - name: admin
      port: 8081
      targetPort: admin
      protocol: TCP
---
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: {{ $name }}
  namespace: {{ $ctx.Release.Namespace }}
  labels:
    {{- include "common.labels" $ctx | nindent 4 }}
    {{- with $g.serviceMonitor.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  selector:
    matchLabels:
      {{- include "common.selectorLabels" $ctx | nindent 6 }}
      app.kubernetes.io/component: metrics
  namespaceSelector:
    matchNames: [{{ $ctx.Release.Namespace | quote }}]
  endpoints:
    - port: admin
      path: /metrics
      interval: {{ $g.serviceMonitor.interval }}
{{- end }}
{{- end -}}
