#!/usr/bin/env bash
# Renders the chart into plain manifests for clusters without Helm, one file per controller
# group (deploy/manifests/<group>.yaml, release `ingot` in namespace `ingot-system`, CRDs
# included), and copies the alert rules into the chart (its PrometheusRule). A test fails
# when the committed files differ from the chart.
source "$(dirname "$0")/lib.sh"
cd "$INGOT_ROOT"
build_helm
cp deploy/observability/prometheus-rules.yaml deploy/helm/ingot/files/prometheus-rules.yaml
for group in pools rufio seeder gardener; do
  {
    echo "# ingot with --controllers $group, rendered from deploy/helm/ingot by scripts/render-manifests.sh."
    echo "# Apply after creating the namespace: kubectl create namespace ingot-system"
    "$INGOT_HELM/helm" template ingot deploy/helm/ingot --namespace ingot-system --include-crds \
      --set "controllers={$group}"
  } >"deploy/manifests/$group.yaml"
done
