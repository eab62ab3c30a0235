#!/usr/bin/env bash
# Validates deploy/kubernetes/ offline: every manifest against the Kubernetes
# OpenAPI schemas bundled in PyPI's kubernetes-validate (strict: unknown
# fields are errors), for the oldest and newest Kubernetes we claim, then the
# parts no schema knows (tools/validate_k8s_extra.py): the ServiceMonitor
# (a custom resource: structure checked by hand), kustomization.yaml's file
# list, and that the manifests agree with each other and with the daemon's
# config (replicas = ROADSEG_SHARDS, grace period > shutdown_timeout_s, ...).
# The validator is installed, pinned, into a venv under target/ (once).
#   tools/validate-k8s.sh [DIR]     # default deploy/kubernetes
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-deploy/kubernetes}
venv=target/validate-k8s-venv
req=tools/validate-k8s-requirements.txt
# Reinstalled when the pins change.
if ! cmp -s "$req" "$venv/requirements.txt" 2>/dev/null; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$req"
  cp "$req" "$venv/requirements.txt"
fi
# Custom resources and kustomize's own file: no Kubernetes schema has them.
no_schema='^kind: (ServiceMonitor|Kustomization)$'
files=()
for f in "$dir"/*.yaml; do
  grep -Eq "$no_schema" "$f" || files+=("$f")
done
skipped=$(grep -El "$no_schema" "$dir"/*.yaml | xargs -r -n1 basename | tr '\n' ' ' || true)
echo "validate-k8s: no Kubernetes schema for ${skipped:-nothing}(custom kinds: checked by tools/validate_k8s_extra.py)"
for version in 1.30.0 1.37.0; do
  out=$("$venv/bin/kubernetes-validate" --strict --quiet -k "$version" "${files[@]}" 2>&1) || { echo "$out"; echo "validate-k8s: FAILED against Kubernetes $version" >&2; exit 1; }
  # A kind without a schema is only a warning to it: here it is an error.
  if grep -q "Couldn't find schema" <<<"$out"; then
    echo "$out"; echo "validate-k8s: a manifest has a kind with no schema (add it to no_schema and check it by hand)" >&2; exit 1
  fi
  echo "validate-k8s: ${#files[@]} files valid against Kubernetes $version (strict)"
done
"$venv/bin/python" tools/validate_k8s_extra.py "$dir"
