{{/*
Names, labels, the rendered spokekeeper.yaml and the per-namespace access the spokes need.
*/}}
{{- define "spokekeeper.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "spokekeeper.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "spokekeeper.labels" -}}
{{ include "spokekeeper.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "spokekeeper.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "spokekeeper.fullname" .) -}}
{{- else -}}
{{- .Values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{/* Fixed paths inside the pod. */}}
{{- define "spokekeeper.fleetPath" -}}/var/lib/spokekeeper/fleet{{- end -}}

{{/*
spokekeeper.yaml: .Values.config plus what the chart decides (paths, listen address, hub).
A relative sealing.cert is taken inside the fleet repo.
*/}}
{{- define "spokekeeper.config" -}}
{{- $c := deepCopy .Values.config -}}
{{- $repo := $c.repo | default dict -}}
{{- $_ := set $repo "path" (include "spokekeeper.fleetPath" .) -}}
{{- $_ := set $repo "branch" .Values.fleet.branch -}}
{{- $_ := set $c "repo" $repo -}}
{{- $sealing := $c.sealing | default dict -}}
{{- if not (isAbs $sealing.cert) -}}
{{- $_ := set $sealing "cert" (printf "%s/%s" (include "spokekeeper.fleetPath" .) $sealing.cert) -}}
{{- end -}}
{{- $ssh := $c.ssh | default dict -}}
{{- $_ := set $ssh "identity" "/etc/spokekeeper/ssh/id_ed25519" -}}
{{- $_ := set $ssh "known_hosts" "/etc/spokekeeper/ssh/known_hosts" -}}
{{- $_ := set $c "ssh" $ssh -}}
{{- $_ := set $c "metrics" (dict "listen" (printf "0.0.0.0:%d" (int .Values.metrics.port))) -}}
{{- if .Values.forgeTokenSecret -}}
{{- $forge := $repo.forge | default dict -}}
{{- $_ := unset $forge "token_env" -}}
{{- $_ := set $forge "token_file" "/etc/spokekeeper/forge/token" -}}
{{- $_ := set $repo "forge" $forge -}}
{{- end -}}
{{- if eq ($repo.mode | default "direct") "pull-request" -}}
{{- if .Values.signingKeySecret -}}
{{- $_ := set $repo "signing_key" "/etc/spokekeeper/signing/signing-key" -}}
{{- else if not $repo.signing_key -}}
{{- fail "signingKeySecret: review mode (config.repo.mode: pull-request) signs its branches: create the Secret (ssh-keygen -t ed25519 -N '' -C spokekeeper -f signing-key; kubectl create secret generic spokekeeper-signing --from-file=signing-key) and set signingKeySecret: spokekeeper-signing" -}}
{{- end -}}
{{- end -}}
{{- if include "spokekeeper.checkTokens" . | fromJson -}}
{{- $cred := $c.credential | default dict -}}
{{- $fed := $cred.federated | default dict -}}
{{- if not $fed.check_as -}}
{{- $_ := set $fed "check_as" (printf "%s/%s" .Release.Namespace (include "spokekeeper.serviceAccountName" .)) -}}
{{- end -}}
{{- $_ := set $cred "federated" $fed -}}
{{- $_ := set $c "credential" $cred -}}
{{- end -}}
{{- if .Values.hub.enabled -}}
{{- $ctl := .Values.hub.controller -}}
{{- $_ := set $c "hub" (dict "controller" (dict "namespace" $ctl.namespace "name" $ctl.name "port" (toString $ctl.port)) "verify_timeout" .Values.hub.verifyTimeout) -}}
{{- end -}}
{{- toYaml $c -}}
{{- end -}}

{{/*
What the hub code reads per namespace, from config.spokes with the daemon's defaults
(secret NAME-kubeconfig in flux-system), as JSON:
{"NS": {"sealedsecrets": [names], "configmaps": [names], "kustomizations": [names], "consumers": bool}}.
A federated spoke (its credential.mode, else config.credential.mode) commits a ConfigMap
under its secret's name and namespace: it is read instead of a SealedSecret.
A spoke without `kustomization:` has every Flux consumer of its Secret found by listing the
Kustomizations and HelmReleases of the Secret's namespace ("consumers": true); one with it
(even `{}`: name NAME, namespace flux-system) has only that Kustomization, by name.
*/}}
{{- define "spokekeeper.spokeAccess" -}}
{{- $byNs := dict -}}
{{- $global := $.Values.config.credential | default dict -}}
{{- $empty := dict "sealedsecrets" list "configmaps" list "kustomizations" list "consumers" false -}}
{{- range .Values.config.spokes -}}
{{- $secret := .secret | default dict -}}
{{- $sns := $secret.namespace | default "flux-system" -}}
{{- $sname := $secret.name | default (printf "%s-kubeconfig" .name) -}}
{{- $own := .credential | default dict -}}
{{- $kind := eq ($own.mode | default $global.mode | default "extracted") "federated" | ternary "configmaps" "sealedsecrets" -}}
{{- $e := get $byNs $sns | default (deepCopy $empty) -}}
{{- $_ := set $e $kind (append (get $e $kind) $sname | uniq | sortAlpha) -}}
{{- $_ := set $byNs $sns $e -}}
{{- if and (hasKey . "kustomization") (not (kindIs "invalid" .kustomization)) -}}
{{- $kust := .kustomization -}}
{{- $kns := $kust.namespace | default "flux-system" -}}
{{- $kname := $kust.name | default .name -}}
{{- $e := get $byNs $kns | default (deepCopy $empty) -}}
{{- $_ := set $e "kustomizations" (append $e.kustomizations $kname | uniq | sortAlpha) -}}
{{- $_ := set $byNs $kns $e -}}
{{- else -}}
{{- $_ := set $e "consumers" true -}}
{{- end -}}
{{- end -}}
{{- toJson $byNs -}}
{{- end -}}

{{/*
The ServiceAccounts whose tokens spokekeeper asks for (hub::token), by namespace, as JSON
{"NS": [names]}: each federated spoke's credential.federated.check_as (its own, else the
global one, else the chart's own ServiceAccount, which spokekeeper.config writes). Never a
Flux controller's: its token is hub admin, so that is refused here as the daemon refuses it.
*/}}
{{- define "spokekeeper.checkTokens" -}}
{{- $global := .Values.config.credential | default dict -}}
{{- $globalFed := $global.federated | default dict -}}
{{- $ownSa := printf "%s/%s" .Release.Namespace (include "spokekeeper.serviceAccountName" .) -}}
{{- $byNs := dict -}}
{{- range .Values.config.spokes -}}
{{- $own := .credential | default dict -}}
{{- if eq ($own.mode | default $global.mode | default "extracted") "federated" -}}
{{- $fed := $own.federated | default dict -}}
{{- $as := $fed.check_as | default $globalFed.check_as | default $ownSa -}}
{{- $accounts := $fed.service_accounts | default $globalFed.service_accounts | default (list "flux-system/kustomize-controller" "flux-system/helm-controller") -}}
{{- $parts := splitList "/" (toString $as) -}}
{{- if or (ne (len $parts) 2) (not (index $parts 0)) (not (index $parts 1)) -}}
{{- fail (printf "credential.federated.check_as of spoke %s: %q is not NAMESPACE/NAME of a hub ServiceAccount; leave it unset for the chart's own (%s)" .name $as $ownSa) -}}
{{- end -}}
{{- if has $as $accounts -}}
{{- fail (printf "credential.federated.check_as of spoke %s: %s is one of its service_accounts (the Flux controllers): granting its token is granting hub admin; leave check_as unset for the chart's own ServiceAccount (%s)" .name $as $ownSa) -}}
{{- end -}}
{{- $ns := index $parts 0 -}}
{{- $_ := set $byNs $ns (append (get $byNs $ns | default list) (index $parts 1) | uniq | sortAlpha) -}}
{{- end -}}
{{- end -}}
{{- toJson $byNs -}}
{{- end -}}

{{- define "spokekeeper.containerSecurityContext" -}}
runAsNonRoot: true
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* git over ssh with the fleet deploy key, strict host keys, never a prompt. */}}
{{- define "spokekeeper.gitEnv" -}}
- name: HOME
  value: /var/lib/spokekeeper
- name: GIT_SSH_COMMAND
  value: ssh -i /etc/spokekeeper/git/identity -o IdentitiesOnly=yes -o UserKnownHostsFile=/etc/spokekeeper/git/known_hosts -o StrictHostKeyChecking=yes -o BatchMode=yes
{{- end -}}

{{- define "spokekeeper.volumeMounts" -}}
- name: state
  mountPath: /var/lib/spokekeeper
- name: tmp
  mountPath: /tmp
- name: git
  mountPath: /etc/spokekeeper/git
  readOnly: true
{{- end -}}

{{/*
The hub ServiceAccounts (NAMESPACE/NAME) the token audience policy holds to when they ask
for a token, of any account, as a JSON list: Flux's two controllers, which ask (for their
own, or a ConfigMap's serviceAccountName), plus credential.federated.service_accounts,
the global list and each federated spoke's own.
*/}}
{{- define "spokekeeper.tokenRequesters" -}}
{{- $global := .Values.config.credential | default dict -}}
{{- $globalFed := $global.federated | default dict -}}
{{- $out := list "flux-system/kustomize-controller" "flux-system/helm-controller" -}}
{{- $out = concat $out ($globalFed.service_accounts | default list) -}}
{{- range .Values.config.spokes -}}
{{- $own := .credential | default dict -}}
{{- if eq ($own.mode | default $global.mode | default "extracted") "federated" -}}
{{- $fed := $own.federated | default dict -}}
{{- $out = concat $out ($fed.service_accounts | default list) -}}
{{- end -}}
{{- end -}}
{{- toJson ($out | uniq | sortAlpha) -}}
{{- end -}}

{{/*
Each federated spoke's own hub ServiceAccount (credential.federated.service_account_name,
{spoke} filled in, in its secret's namespace), by namespace, as JSON {"NS": [names]}: the
spoke's own name, else none when it lists service_accounts, else the global name.
*/}}
{{- define "spokekeeper.ownAccounts" -}}
{{- $global := .Values.config.credential | default dict -}}
{{- $globalFed := $global.federated | default dict -}}
{{- $byNs := dict -}}
{{- range .Values.config.spokes -}}
{{- $own := .credential | default dict -}}
{{- if eq ($own.mode | default $global.mode | default "extracted") "federated" -}}
{{- $fed := $own.federated | default dict -}}
{{- $name := $fed.service_account_name | default (ternary "" ($globalFed.service_account_name | default "") (hasKey $fed "service_accounts")) -}}
{{- if $name -}}
{{- $secret := .secret | default dict -}}
{{- $ns := $secret.namespace | default "flux-system" -}}
{{- $_ := set $byNs $ns (append (get $byNs $ns | default list) (replace "{spoke}" .name (toString $name)) | uniq | sortAlpha) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson $byNs -}}
{{- end -}}

{{/* Whether any spoke is federated (its credential.mode, else config.credential.mode). */}}
{{- define "spokekeeper.anyFederated" -}}
{{- $global := .Values.config.credential | default dict -}}
{{- range .Values.config.spokes -}}
{{- $own := .credential | default dict -}}
{{- if eq ($own.mode | default $global.mode | default "extracted") "federated" -}}true{{- end -}}
{{- end -}}
{{- end -}}
