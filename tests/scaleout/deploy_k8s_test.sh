#!/usr/bin/env bash
# deploy/k8s renders with `kubectl kustomize` (offline) and keeps the contract SCALEOUT.md §6.3
# asks for. Structural checks with yq; the schema validation with npm kubernetes-models/ajv
# (§8 item 10) is tests/scaleout/k8s_schemas.test.mjs. Exit 77 (skip) without kubectl or yq.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
command -v kubectl >/dev/null && command -v yq >/dev/null || { echo "skip: kubectl or yq missing"; exit 77; }
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
kubectl kustomize "$root/deploy/k8s" > "$out"
fail() { echo "FAIL: $*" >&2; exit 1; }
q() { yq -r "$1" "$out" | grep -v '^null$' || true; }
kinds="$(q '.kind' | sort | tr '\n' ' ')"
for k in ConfigMap Deployment Gateway HTTPRoute InferenceObjective InferencePool ScaledObject Service; do
  [[ " $kinds " == *" $k "* ]] || fail "missing kind $k (have: $kinds)"
done
sel() { q "select(.kind == \"$1\" and .metadata.name == \"$2\") | $3"; }
[[ "$(sel Deployment tokenserve '.spec.template.spec.containers[0].readinessProbe.httpGet.path')" == /ready ]] || fail "replica readiness is not /ready"
drain="$(sel Deployment tokenserve '.spec.template.spec.containers[0].args | index("--drain-timeout") as $i | .[$i + 1]')"
grace="$(sel Deployment tokenserve '.spec.template.spec.terminationGracePeriodSeconds')"
[[ -n "$drain" && -n "$grace" ]] && (( grace > drain )) || fail "grace ($grace) must exceed drain ($drain)"
[[ -n "$(sel Deployment tokenserve '.spec.template.spec.containers[0].lifecycle.preStop')" ]] || fail "no preStop"
[[ "$(sel Deployment tokenserve '.spec.template.metadata.labels.app')" == tokenserve ]] || fail "label app"
[[ "$(sel InferencePool tokenserve-pool '.apiVersion')" == inference.networking.k8s.io/v1 ]] || fail "pool apiVersion"
[[ "$(sel InferencePool tokenserve-pool '.spec.targetPorts[0].number')" == 8000 ]] || fail "pool targetPorts"
[[ "$(sel InferencePool tokenserve-pool '.spec.endpointPickerRef.port.number')" == 9002 ]] || fail "epp port"
[[ "$(sel InferencePool tokenserve-pool '.spec.endpointPickerRef.failureMode')" == FailClose ]] || fail "failureMode"
[[ "$(sel InferencePool tokenserve-pool '.spec.endpointPickerRef.name')" == tokenserve-epp ]] || fail "epp name"
[[ -n "$(sel Service tokenserve-epp '.spec.ports[] | select(.port == 9002) | .port')" ]] || fail "epp service port"
[[ "$(sel HTTPRoute tokenserve-route '.spec.rules[0].backendRefs[0].kind')" == InferencePool ]] || fail "route backend"
[[ "$(sel InferenceObjective interactive '.spec.priority')" == 100 ]] || fail "interactive priority"
[[ "$(sel InferenceObjective batch '.spec.priority')" == -1 ]] || fail "batch priority"
[[ "$(sel ScaledObject tokenserve '.spec.triggers[0].metadata.query')" == 'sum(tokenserve:num_requests_waiting{app="tokenserve"})' ]] || fail "keda query"
[[ "$(sel ScaledObject tokenserve '.spec.triggers[0].metadata.threshold')" == 4 ]] || fail "keda threshold"
[[ "$(sel ScaledObject tokenserve '.spec.triggers[0].metadata.activationThreshold')" == 1 ]] || fail "keda activation"
[[ "$(sel ScaledObject tokenserve '.spec.triggers[1].metadata.threshold')" == 0.85 ]] || fail "keda kv threshold"
(( $(sel ScaledObject tokenserve '.spec.minReplicaCount') >= 1 )) || fail "minReplicaCount"
[[ "$(sel ScaledObject tokenserve '.spec.advanced.horizontalPodAutoscalerConfig.behavior.scaleDown.stabilizationWindowSeconds')" == 600 ]] || fail "scale-down window"
# The EPP reads our metric names (no compat twin needed).
sel Deployment tokenserve-epp '.spec.template.spec.containers[0].args[]' | grep -qx -- '--total-queued-requests-metric=tokenserve:num_requests_waiting' || fail "epp metric flag"
# Replicas accept only the gateway's signed identity, and both sides read the same secret.
rargs="$(sel Deployment tokenserve '.spec.template.spec.containers[0].args | join(" ")')"
gargs="$(sel Deployment tokenserve-gateway '.spec.template.spec.containers[0].args | join(" ")')"
[[ " $rargs " == *" --trust-gateway --gateway-secret-env GATEWAY_SECRET "* && " $rargs " != *" --no-auth "* ]] || fail "replicas must run --trust-gateway"
[[ " $gargs " == *" --gateway-secret-env GATEWAY_SECRET "* && " $gargs " == *" --rules "* ]] || fail "gateway must sign and load rules"
[[ " $gargs " == *' --pool gie --pool-url $(POOL_URL) '* ]] || fail "the gateway must forward to the InferencePool route (pool = gie)"
for d in tokenserve tokenserve-gateway; do
  [[ "$(sel Deployment $d '.spec.template.spec.containers[0].env[] | select(.name == "GATEWAY_SECRET") | .valueFrom.secretKeyRef.key')" == gateway-secret ]] || fail "$d GATEWAY_SECRET"
done
# Every metric the manifests name is one `serve` exposes (checked against the source).
for m in num_requests_waiting num_requests_running kv_cache_usage_perc; do
  grep -q "\"$m\"" "$root/src/obs/server_metrics.cc" || fail "serve does not expose tokenserve:$m"
done
echo "deploy/k8s: $(q '.kind' | wc -l) objects rendered and checked"
