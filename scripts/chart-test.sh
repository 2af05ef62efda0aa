#!/usr/bin/env bash
# The Helm chart's checks (deploy/helm/order-worker), part of the unit tier:
#   * `helm lint` and `helm template` with the default values and with the
#     exactly-once, shards and TLS values (deploy/helm/order-worker/ci/);
#   * every rendered object through chart-check (deploy/helm/check): decoded
#     strictly into k8s.io/api's and the prometheus-operator's Go types, a
#     ScaledObject against KEDA's published CRD schema; replica ids from
#     each pod's name, the grace period above shutdown.timeout_ms + 2 s,
#     non-root read-only pods, secrets as files, the PrometheusRule equal
#     to config/prometheus's rules;
#   * values the chart must refuse: a password in the values, a grace period
#     not above shutdown.timeout_ms + 2 s;
#   * the checks must be able to fail: five faults planted in copies of the
#     chart (a replica id from the namespace, a fixed short grace period, a
#     rule dropped from the rules file, an unknown field in the
#     StatefulSet, an unknown field in the ScaledObject) must each be
#     refused with its own finding;
#   * the README's `helm install` command with its values file, run with
#     --dry-run=client appended (no cluster is reachable here), through
#     chart-check.
# Helm comes from the Go module proxy (`go install
# helm.sh/helm/v4/cmd/helm@v4.3.2`) into $OW_TOOLS_DIR (default
# /var/cache/order-worker/tools), KEDA's CRD from its Go module; Go's own
# caches (GOMODCACHE, GOCACHE) are outside the clone, so a second run builds
# nothing.
#
#   scripts/chart-test.sh             the checks
#   scripts/chart-test.sh --prepare   only install helm and build chart-check
#                                     (scripts/test.sh starts it early, in the
#                                     background, while other tiers run)
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
messages chart --die FAIL 1

HELM_VERSION=v4.3.2
KEDA_VERSION=v2.18.3
TOOLS="${OW_TOOLS_DIR:-/var/cache/order-worker/tools}"
HELM="$TOOLS/helm-$HELM_VERSION/helm"
CHECK="$BUILD/chart-check"
CHART="$ROOT/deploy/helm/order-worker"
RULES="$ROOT/config/prometheus/order-worker.rules.yml"
# The module proxy and Go's caches as configured; no toolchain download.
export GOTOOLCHAIN=local GOFLAGS=-mod=readonly

prepare() {
  local t0=$SECONDS
  command -v go >/dev/null 2>&1 || die "go is missing (the chart checks build with Go)"
  mkdir -p "$TOOLS" "$BUILD"
  if [[ ! -x $HELM ]]; then
    # One install at a time per machine; the second finds it made.
    exec 7>"$TOOLS/.helm.lock"
    flock -w 900 7 || die "another run held $TOOLS/.helm.lock for 15 minutes"
    if [[ ! -x $HELM ]]; then
      GOBIN="$TOOLS/helm-$HELM_VERSION.tmp" go install "helm.sh/helm/v4/cmd/helm@$HELM_VERSION" ||
        die "go install helm.sh/helm/v4/cmd/helm@$HELM_VERSION failed"
      rm -rf "$TOOLS/helm-$HELM_VERSION"
      mv "$TOOLS/helm-$HELM_VERSION.tmp" "$TOOLS/helm-$HELM_VERSION"
    fi
    exec 7>&-
  fi
  (cd "$ROOT/deploy/helm/check" && go build -trimpath -o "$CHECK" .) || die "building chart-check failed"
  KEDA_DIR="$(go mod download -json "github.com/kedacore/keda/v2@$KEDA_VERSION" | jq -r .Dir)"
  KEDA_CRD="$KEDA_DIR/config/crd/bases/keda.sh_scaledobjects.yaml"
  [[ -f $KEDA_CRD ]] || die "KEDA's CRD is not in github.com/kedacore/keda/v2@$KEDA_VERSION ($KEDA_CRD)"
  say "prepared in $((SECONDS - t0)) s: helm $HELM_VERSION, chart-check, KEDA $KEDA_VERSION's ScaledObject CRD"
}
prepare
[[ ${1:-} == --prepare ]] && exit 0

WORK="$(mktemp -d)"
on_exit 'rm -rf "$WORK"'
t0=$SECONDS
# helm notes that the rules file is a symbolic link; nothing else may go to stderr.
helm_quiet() { "$HELM" "$@" 2> >(grep -v 'found symbolic link in path' >&2); }
check() {  # CHART_DIR NAME [HELM ARGS...]: renders, prints chart-check's line
  local dir=$1 name=$2
  shift 2
  helm_quiet template ow "$dir" "$@" >"$WORK/$name.yaml" || return 1
  "$CHECK" --rules "$RULES" --keda-crd "$KEDA_CRD" <"$WORK/$name.yaml"
}

# --- lint and render with each set of values ---------------------------------
sets=(default)
for f in "$CHART"/ci/*-values.yaml; do sets+=("$(basename "$f" -values.yaml)"); done
for s in "${sets[@]}"; do
  args=()
  [[ $s == default ]] || args=(-f "$CHART/ci/$s-values.yaml")
  helm_quiet lint --strict "$CHART" "${args[@]}" >"$WORK/lint-$s.txt" 2>&1 || { cat "$WORK/lint-$s.txt"; die "helm lint with the $s values"; }
  line="$(check "$CHART" "$s" "${args[@]}")" || { printf '%s\n' "$line"; die "chart-check of the $s values"; }
  say "$s values: lint ok; ${line#chart-check: ok: }"
done

# --- values the chart refuses ----------------------------------------------------
refused() {  # WHAT EXPECTED-TEXT HELM-ARGS...
  local what=$1 want=$2 out
  shift 2
  if out="$(helm_quiet template ow "$CHART" "$@" 2>&1)"; then die "the chart accepted $what"; fi
  grep -qF -- "$want" <<<"$out" || { printf '%s\n' "$out"; die "the chart refused $what without saying '$want'"; }
}
refused "a password in the values" "/config/mysql.password" --set 'config.mysql\.password=secret'
refused "a grace period of 12 s with shutdown.timeout_ms 10000" "must exceed shutdown.timeout_ms (10000 ms) + 2 s" \
  --set terminationGracePeriodSeconds=12
say "refused: a password in the values (schema), a grace period not above shutdown.timeout_ms + 2 s (template)"

# --- planted faults: each check must be able to fail ------------------------
planted=0
plant() {  # NAME EXPECTED-FINDING VALUES-SET EDIT-COMMAND...: a copy of the chart, edited
  local name=$1 want=$2 set=$3 dir="$WORK/plant-$1" out
  shift 3
  cp -rL "$CHART" "$dir"
  (cd "$dir" && "$@")
  local args=()
  [[ $set == default ]] || args=(-f "$dir/ci/$set-values.yaml")
  if out="$(check "$dir" "plant-$name" "${args[@]}" 2>&1)"; then
    die "planted fault '$name' was not found: $out"
  fi
  grep -qF -- "$want" <<<"$out" || { printf '%s\n' "$out"; die "planted fault '$name' failed without '$want'"; }
  say "planted $name: $(grep -F -- "$want" <<<"$out" | head -n 1)"
  planted=$((planted + 1))
}
plant replica-id "does not come from the pod's name" default \
  sed -i '0,/fieldPath: metadata.name/s//fieldPath: metadata.namespace/' templates/statefulset.yaml
plant grace "does not exceed shutdown.timeout_ms" default \
  sed -i -e 's/^{{- fail .*terminationGracePeriodSeconds.*$//' \
  -e 's/terminationGracePeriodSeconds: {{ .Values.terminationGracePeriodSeconds }}/terminationGracePeriodSeconds: 11/' \
  templates/statefulset.yaml
plant rule-missing "its rules differ from" exactly-once \
  /usr/bin/python3 -c 'import yaml; p="files/order-worker.rules.yml"; d=yaml.safe_load(open(p)); d["groups"][0]["rules"].pop(); yaml.safe_dump(d, open(p, "w"))'
plant unknown-field 'unknown field "spec.template.spec.containers[0].terminationMessagePolicyy"' default \
  sed -i 's/^\(          imagePullPolicy: .*\)$/\1\n          terminationMessagePolicyy: File/' templates/statefulset.yaml
plant keda-unknown-field 'unknown field "maxReplicas"' exactly-once \
  sed -i 's/^\(  maxReplicaCount: .*\)$/\1\n  maxReplicas: 3/' templates/scaledobject.yaml
say "planted faults: $planted of 5 refused, each with its finding"

# --- the README's helm install ------------------------------------------------------
# The command and the values file between the README's markers, run as
# written with --dry-run=client appended: no cluster is reachable here.
readme_block() {  # NAME: the fenced block after <!-- readme-test: NAME -->
  awk -v m="<!-- readme-test: $1 -->" '$0 == m { on = 1; next } on && /^```/ { if (in_block) exit; in_block = 1; next } in_block { print }' "$ROOT/README.md"
}
readme_block helm-values >"$WORK/my-values.yaml"
cmd="$(readme_block helm-install)"
[[ -s $WORK/my-values.yaml && $cmd == "helm install "* ]] || die "README.md: no helm install command or values file between its readme-test markers"
(cd "$WORK" && ln -s "$ROOT/deploy" deploy && eval "\"\$HELM\" ${cmd#helm } --dry-run=client" 2> >(grep -v 'found symbolic link' >&2)) >"$WORK/install.txt" ||
  { cat "$WORK/install.txt"; die "the README's '$cmd' failed"; }
grep -q '^STATUS: pending-install' "$WORK/install.txt" || die "the README's helm install did not render a release"
# The manifests: from HOOKS: up to NOTES:, without helm's section titles.
sed -n '/^HOOKS:$/,/^NOTES:$/p' "$WORK/install.txt" | grep -vE '^(HOOKS|MANIFEST|NOTES):$' >"$WORK/install.yaml"
line="$("$CHECK" --rules "$RULES" --keda-crd "$KEDA_CRD" <"$WORK/install.yaml")" ||
  { printf '%s\n' "$line"; die "chart-check of the README's helm install"; }
say "README: '$cmd --dry-run=client': ${line#chart-check: ok: }"
say "passed in $((SECONDS - t0)) s: lint and chart-check of ${#sets[@]} value sets, 2 refusals, $planted of 5 planted faults, the README's helm install"
