{{/* The orchestrator's pods carry this name label: the lane NetworkPolicies admit exactly it. */}}
{{- define "eval.name" -}}n8n-eval-orchestrator{{- end }}

{{- define "eval.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 44 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 44 | trimSuffix "-" -}}
{{- end -}}
{{- end }}

{{- define "eval.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "eval.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end }}

{{- define "eval.janitorServiceAccountName" -}}
{{- printf "%s-janitor" (include "eval.fullname" .) -}}
{{- end }}

{{- define "eval.priorityClassName" -}}
{{- $pc := .Values.disruption.priorityClass -}}
{{- if $pc.name -}}{{- $pc.name -}}{{- else if and $pc.create .Values.clusterScoped -}}{{- printf "%s-%s-orchestrator" .Release.Namespace (include "eval.fullname" .) | trimPrefix "-" | trunc 63 | trimSuffix "-" -}}{{- end -}}
{{- end }}

{{- define "eval.selectorLabels" -}}
app.kubernetes.io/name: {{ include "eval.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "eval.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "eval.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* An image reference: repository@digest when a digest is given (what nodes pull is then fixed,
whatever the tag later points at), else repository:tag. */}}
{{- define "eval.imageRef" -}}
{{- if .img.digest -}}
{{- printf "%s@%s" .img.repository .img.digest -}}
{{- else -}}
{{- printf "%s:%s" .img.repository (default .appVersion .img.tag) -}}
{{- end -}}
{{- end }}

{{- define "eval.image" -}}
{{- include "eval.imageRef" (dict "img" .Values.image "appVersion" .Chart.AppVersion) -}}
{{- end }}

{{- define "eval.laneImage" -}}
{{- include "eval.imageRef" (dict "img" .Values.laneImage "appVersion" .Chart.AppVersion) -}}
{{- end }}

{{/* `orchestrator run` options shared by the nightly CronJob and the A/B Job (a YAML list). */}}
{{- /* The model gateway's ports: gateway.port, and gateway.port + 1 for the second arm of an A/B that runs
both arms at once (ab.sequential: each arm's run starts its own gateway). */}}
{{- define "eval.gatewayPorts" -}}
{{- $ports := list (int .Values.gateway.port) -}}
{{- if and .Values.ab.enabled .Values.ab.sequential -}}{{- $ports = append $ports (add (int .Values.gateway.port) 1) -}}{{- end -}}
{{- toJson $ports -}}
{{- end }}

{{- define "eval.runArgs" -}}
{{- $run := .Values.run -}}
- --backend
- {{ .Values.backend | quote }}
{{- /* run.builder empty: remote on kubernetes (claude in the lane pods), mcp for static lanes */}}
{{- $builder := $run.builder | default (ternary "remote" "mcp" (eq .Values.backend "kubernetes")) }}
{{- if and (eq $builder "remote") (ne .Values.backend "kubernetes") }}
{{- fail "run.builder=remote needs backend=kubernetes (lane pods with a build runner); use run.builder=mcp" }}
{{- end }}
- --builder
- {{ $builder | quote }}
{{- if eq .Values.backend "static" }}
- --base-url
- {{ join "," .Values.staticBaseUrls | quote }}
{{- end }}
- --source
{{- /* a suite is a LangTracer suite: with one, cases come from LangTracer */}}
- {{ ternary "langtracer" $run.source (not (empty $run.suite)) | quote }}
{{- with $run.suite }}
- --suite
- {{ . | quote }}
{{- end }}
- --tier
- {{ $run.tier | quote }}
- --iterations
- {{ $run.iterations | quote }}
- --lanes
- {{ $run.lanes | quote }}
{{- with $run.concurrency }}
- --concurrency
- {{ . | quote }}
{{- end }}
{{- with $run.perLaneBuilds }}
- --per-lane-builds
- {{ . | quote }}
{{- end }}
{{- with $run.profile }}
- --profile
- {{ . | quote }}
{{- end }}
{{- range $k, $v := $run.env }}
- --env
- {{ printf "%s=%s" $k $v | quote }}
{{- end }}
{{- with $run.baseline }}
- --baseline
- {{ . | quote }}
{{- end }}
{{- with $run.experimentName }}
- --experiment-name
- {{ . | quote }}
{{- end }}
{{- with $run.dataset }}
- --dataset
- {{ . | quote }}
{{- end }}
{{- if not (kindIs "invalid" $run.maxCostUsd) }}
- --max-cost-usd
- {{ $run.maxCostUsd | toString | quote }}
{{- end }}
- --output-dir
- {{ printf "%s/$(POD_NAME)" .Values.results.mountPath | quote }}
- --metrics-port
- {{ .Values.metrics.port | quote }}
- --metrics-host
- {{ .Values.metrics.host | quote }}
{{- $gw := .Values.gateway }}
{{- if $gw.enabled }}
- --model-gateway-host
- "0.0.0.0"
- --model-gateway-port
- {{ $gw.port | quote }}
{{- if eq .Values.backend "kubernetes" }}
- --model-gateway-url
- {{ printf "http://%s-gateway.%s.svc:%v" (include "eval.fullname" .) .Release.Namespace $gw.port | quote }}
{{- end }}
- --concurrency-min
- {{ $gw.concurrencyMin | default 1 | quote }}
{{- with $gw.concurrencyMax }}
- --concurrency-max
- {{ . | quote }}
{{- end }}
- --provider-wait-s
- {{ $gw.providerWaitSeconds | default 1200 | toString | quote }}
{{- else }}
- --no-model-gateway
{{- end }}
{{- with .Values.metrics.pushgateway }}
- --pushgateway
- {{ . | quote }}
{{- end }}
{{- range $run.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- range $run.casesPaths }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{- define "eval.secretEnv" -}}
{{- $refs := list
  (list "ANTHROPIC_API_KEY" .Values.secrets.anthropicApiKey)
  (list "N8N_INSTANCE_AI_MODEL_API_KEY" .Values.secrets.instanceAiModelApiKey)
  (list "OPENAI_API_KEY" .Values.secrets.openaiApiKey)
  (list "LANGSMITH_API_KEY" .Values.secrets.langsmithApiKey)
  (list "LANGTRACER_API_KEY" .Values.secrets.langtracerApiKey) -}}
{{- range $refs }}
{{- $name := index . 0 }}
{{- $ref := index . 1 }}
{{- if and $ref $ref.existingSecret }}
- name: {{ $name }}
  valueFrom:
    secretKeyRef:
      name: {{ $ref.existingSecret | quote }}
      key: {{ $ref.key | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The orchestrator pod. Call with (dict "root" $ "component" "nightly" "args" (list ...) "deadline" N), N
the Job's activeDeadlineSeconds (the run's deadline: lane pods get what is left of it).
*/}}
{{- define "eval.podTemplate" -}}
{{- $root := .root -}}
{{- $v := $root.Values -}}
metadata:
  labels:
    {{- include "eval.selectorLabels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
    {{- with $v.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- $annotations := $v.podAnnotations | default dict }}
  {{- if $v.disruption.doNotDisrupt }}
  {{- /* node consolidation and drains leave a running sweep alone (Karpenter, cluster-autoscaler) */}}
  {{- $annotations = merge (dict "karpenter.sh/do-not-disrupt" "true" "cluster-autoscaler.kubernetes.io/safe-to-evict" "false") $annotations }}
  {{- end }}
  {{- with $annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  restartPolicy: Never
  {{- with (include "eval.priorityClassName" $root) }}
  priorityClassName: {{ . }}
  {{- end }}
  terminationGracePeriodSeconds: {{ $v.terminationGracePeriodSeconds }}
  serviceAccountName: {{ include "eval.serviceAccountName" $root }}
  automountServiceAccountToken: {{ eq $v.backend "kubernetes" }}
  enableServiceLinks: false
  {{- with $v.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    runAsNonRoot: true
    runAsUser: {{ $v.podSecurityContext.runAsUser }}
    runAsGroup: {{ $v.podSecurityContext.runAsGroup }}
    fsGroup: {{ $v.podSecurityContext.fsGroup }}
    seccompProfile:
      type: RuntimeDefault
  containers:
    - name: orchestrator
      image: {{ include "eval.image" $root | quote }}
      imagePullPolicy: {{ $v.image.pullPolicy }}
      command: ["orchestrator"]
      args:
        {{- toYaml .args | nindent 8 }}
      ports:
        - name: metrics
          containerPort: {{ $v.metrics.port }}
          protocol: TCP
        {{- if $v.gateway.enabled }}
        {{- range $i, $port := (include "eval.gatewayPorts" $root | fromJsonArray) }}
        - name: {{ ternary "gateway" (printf "gateway-%d" $i) (eq $i 0) }}
          containerPort: {{ $port }}
          protocol: TCP
        {{- end }}
        {{- end }}
      env:
        # Downward API: the kubernetes backend makes lanes owned by this Pod (or Job).
        - name: POD_NAME
          valueFrom:
            fieldRef:
              fieldPath: metadata.name
        - name: POD_NAMESPACE
          valueFrom:
            fieldRef:
              fieldPath: metadata.namespace
        - name: POD_UID
          valueFrom:
            fieldRef:
              fieldPath: metadata.uid
        {{- if eq $v.lanes.ownerKind "job" }}
        - name: JOB_NAME
          valueFrom:
            fieldRef:
              fieldPath: metadata.labels['batch.kubernetes.io/job-name']
        - name: JOB_UID
          valueFrom:
            fieldRef:
              fieldPath: metadata.labels['batch.kubernetes.io/controller-uid']
        {{- end }}
        # the Job's name: the same for a replacement pod (the nightly run's id, for --resume-existing)
        - name: ORCHESTRATOR_JOB_NAME
          valueFrom:
            fieldRef:
              fieldPath: metadata.labels['batch.kubernetes.io/job-name']
        - name: ORCHESTRATOR_K8S_OWNER_KIND
          value: {{ $v.lanes.ownerKind | quote }}
        - name: ORCHESTRATOR_LANE_IMAGE
          value: {{ include "eval.laneImage" $root | quote }}
        - name: ORCHESTRATOR_K8S_IMAGE_PULL_POLICY
          value: {{ $v.laneImage.pullPolicy | quote }}
        - name: ORCHESTRATOR_K8S_LANE_SECRET
          value: {{ $v.lanes.existingSecret | quote }}
        # the release label on every lane object (the chart's policies select this release's lanes)
        - name: ORCHESTRATOR_K8S_RELEASE
          value: {{ $root.Release.Name | quote }}
        # the run's deadline: each lane pod's activeDeadlineSeconds is what is left of it (+ 600 s)
        - name: ORCHESTRATOR_K8S_RUN_DEADLINE_S
          value: {{ .deadline | quote }}
        # optional: the lane pods' build runners then demand it (Authorization: Bearer)
        - name: N8N_EVAL_RUNNER_TOKEN
          valueFrom:
            secretKeyRef:
              name: {{ $v.lanes.existingSecret | quote }}
              key: N8N_EVAL_RUNNER_TOKEN
              optional: true
        - name: ORCHESTRATOR_K8S_CLUSTER_DOMAIN
          value: {{ $v.lanes.clusterDomain | quote }}
        # lanes.pod and lanes.egress as JSON (orchestrator/lanes/kubernetes/pod_options.py: LanePod, LaneEgress)
        - name: ORCHESTRATOR_K8S_LANE_POD
          value: {{ include "eval.lanePodJson" $root | quote }}
        - name: ORCHESTRATOR_K8S_LANE_EGRESS
          value: {{ $v.lanes.egress | toJson | quote }}
        - name: ORCHESTRATOR_METRICS_HOST
          value: {{ $v.metrics.host | quote }}
        # image of the lane pod's build-runner / sandbox containers (lanes.pod.*.image overrides)
        - name: ORCHESTRATOR_IMAGE
          value: {{ include "eval.image" $root | quote }}
        - name: ORCHESTRATOR_STATE_DIR
          value: {{ printf "%s/.orchestrator" $v.results.mountPath | quote }}
        - name: HOME
          value: /tmp
        - name: TMPDIR
          value: /tmp
        {{- with $v.langtracerUrl }}
        - name: LANGTRACER_URL
          value: {{ . | quote }}
        {{- end }}
        {{- include "eval.secretEnv" $root | nindent 8 }}
      resources:
        {{- toYaml $v.resources | nindent 8 }}
      securityContext:
        runAsNonRoot: true
        privileged: false
        allowPrivilegeEscalation: false
        readOnlyRootFilesystem: true
        capabilities:
          drop: ["ALL"]
        seccompProfile:
          type: RuntimeDefault
      volumeMounts:
        - name: tmp
          mountPath: /tmp
        - name: results
          mountPath: {{ $v.results.mountPath | quote }}
  volumes:
    - name: tmp
      emptyDir:
        sizeLimit: {{ $v.disruption.tmpSizeLimit | quote }}
    - name: results
      {{- if $v.results.persistence.enabled }}
      persistentVolumeClaim:
        claimName: {{ default (printf "%s-results" (include "eval.fullname" $root)) $v.results.persistence.existingClaim | quote }}
      {{- else }}
      emptyDir:
        sizeLimit: {{ $v.disruption.resultsSizeLimit | quote }}
      {{- end }}
  {{- with $v.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}

{{/* lanes.pod as the backend reads it: empty fields dropped. */}}
{{- define "eval.lanePodJson" -}}
{{- $pod := dict -}}
{{- range $k, $v := .Values.lanes.pod -}}
{{- if and (kindIs "map" $v) (hasKey $v "enabled") -}}
{{- $side := dict -}}
{{- range $sk, $sv := $v -}}
{{- if or $sv (kindIs "bool" $sv) -}}
{{- $_ := set $side $sk $sv -}}
{{- end -}}
{{- end -}}
{{- $_ := set $pod $k $side -}}
{{- else if or $v (kindIs "float64" $v) (kindIs "int" $v) (kindIs "int64" $v) -}}
{{- $_ := set $pod $k $v -}}
{{- end -}}
{{- end -}}
{{- /* lane pods pull with the chart's imagePullSecrets unless lanes.pod names its own */ -}}
{{- if not (hasKey $pod "imagePullSecrets") -}}
{{- with .Values.imagePullSecrets -}}
{{- $_ := set $pod "imagePullSecrets" . -}}
{{- end -}}
{{- end -}}
{{- /* lane pods carry the orchestrator pod's do-not-disrupt annotations (lanes/kubernetes/pod_options.py LanePod) */ -}}
{{- $_ := set $pod "doNotDisrupt" (.Values.disruption.doNotDisrupt | default false) -}}
{{- toJson $pod -}}
{{- end }}

{{/* A Job's podFailurePolicy: disruptions (drain, preemption, eviction) are retried without
counting against backoffLimit; exit 2 (a user error) fails the Job at once. */}}
{{- define "eval.podFailurePolicy" -}}
{{- if .Values.podFailurePolicy.enabled }}
podFailurePolicy:
  rules:
    - action: FailJob
      onExitCodes:
        containerName: orchestrator
        operator: In
        values: [2]
      onPodConditions: []  # the 1.27 schema lists it as required; empty = not set
    - action: Ignore
      onPodConditions:
        - type: DisruptionTarget
          status: "True"
{{- end }}
{{- end }}

{{/* Pod/container security settings every pod of this chart shares (Pod Security "restricted"). */}}
{{- define "eval.containerSecurityContext" -}}
runAsNonRoot: true
privileged: false
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* CEL: a container's image is one of these repositories (by tag or digest). Call with a list. */}}
{{- define "eval.imageChecks" -}}
{{- $checks := list -}}
{{- range . -}}
{{- $checks = append $checks (printf "c.image.startsWith('%s:') || c.image.startsWith('%s@')" . .) -}}
{{- end -}}
{{- join " || " $checks -}}
{{- end }}

{{/* The port of a URL: the one it names, else 443 for https and 80 for http. */}}
{{- define "eval.urlPort" -}}
{{- $u := urlParse . -}}
{{- $parts := splitList ":" $u.host -}}
{{- if gt (len $parts) 1 -}}{{- last $parts -}}{{- else if eq $u.scheme "https" -}}443{{- else -}}80{{- end -}}
{{- end }}

{{/* The orchestrator's egress ports besides DNS, its lanes and the API server (a JSON list): model
providers (egressPorts), LangSmith (langsmithPorts), LangTracer and the Pushgateway (their ports, else
those of langtracerUrl / metrics.pushgateway). */}}
{{- define "eval.egressPorts" -}}
{{- $np := .Values.orchestratorNetworkPolicy -}}
{{- $ports := concat $np.egressPorts $np.langsmithPorts -}}
{{- if $np.langtracerPorts -}}{{- $ports = concat $ports $np.langtracerPorts -}}
{{- else if .Values.langtracerUrl -}}{{- $ports = append $ports (include "eval.urlPort" .Values.langtracerUrl | int) -}}{{- end -}}
{{- if $np.pushgatewayPorts -}}{{- $ports = concat $ports $np.pushgatewayPorts -}}
{{- else if .Values.metrics.pushgateway -}}{{- $ports = append $ports (include "eval.urlPort" .Values.metrics.pushgateway | int) -}}{{- end -}}
{{- $out := list -}}
{{- range $ports -}}{{- $out = append $out (int .) -}}{{- end -}}
{{- $out | uniq | sortAlpha | toJson -}}
{{- end }}
