#!/usr/bin/env bash
# Renders the chart into plain manifests for clusters without Helm, one file per controller
# group (deploy/manifests/<group>.yaml, release `ingot` in namespace `ingot-system`, CRDs
# included), writes the chart inline into the Harvester HelmChart (deploy/harvester/helmchart.yaml),
# and copies the alert rules into the chart (its PrometheusRule). Tests fail when the committed
# files differ from the chart.
source "$(dirname "$0")/lib.sh"
cd "$INGOT_ROOT"
build_helm
cp deploy/observability/prometheus-rules.yaml deploy/helm/ingot/files/prometheus-rules.yaml
for group in pools rufio seeder provisioning gardener fencing; do
  {
    echo "# ingot with --controllers $group, rendered from deploy/helm/ingot by scripts/render-manifests.sh."
    echo "# Apply after creating the namespace: kubectl create namespace ingot-system"
    "$INGOT_HELM/helm" template ingot deploy/helm/ingot --namespace ingot-system --include-crds \
      --set "controllers={$group}"
  } >"deploy/manifests/$group.yaml"
done

# Harvester in one `kubectl apply`: RKE2's helm-controller installs a HelmChart in kube-system
# from the chart archive inline (`chartContent`, base64). The archive is deploy/helm/ingot as it
# is (every file, byte for byte; a test compares them), made reproducibly: names sorted, owner
# root, modes 0644, times zero, gzip without a name or time.
chart_archive=$(find deploy/helm/ingot -type f -printf '%P\n' | LC_ALL=C sort |
  sed 's|^|ingot/|' |
  tar -C deploy/helm --create --no-recursion --verbatim-files-from --files-from=- \
    --format=ustar --owner=0 --group=0 --numeric-owner --mode=0644 --mtime=@0 |
  gzip -9 -n | base64 -w0)
{
  cat <<'HEADER'
# ingot on Harvester in one step: `kubectl apply -f deploy/harvester/helmchart.yaml`. RKE2, which
# Harvester runs, installs this chart with its helm-controller (release `ingot` in
# harvester-system). Before applying, make the two Secrets in harvester-system and set
# `pools.ipxeBaseUrl` and the image below (docs/install.md, Harvester). `chartContent` is
# deploy/helm/ingot itself, written by scripts/render-manifests.sh; a test fails when it differs.
apiVersion: helm.cattle.io/v1
kind: HelmChart
metadata:
  name: ingot
  namespace: kube-system
spec:
  targetNamespace: harvester-system
  createNamespace: false
  valuesContent: |
    controllers:
      - pools
    image:
      # The ingot image, pushed where the cluster pulls from (README.md, Install).
      repository: ingot
    pools:
      # The Equinix Metal credentials (METAL_AUTH_TOKEN, PROJECT_ID), as the Equinix addon's.
      credentialsSecret:
        name: equinix-addon
        namespace: harvester-system
      # The cluster join token (key `token`), made from /etc/rancher/rancherd/config.yaml.
      joinTokenSecret:
        name: ingot-join-token
        key: token
      # Required: where the servers fetch their iPXE scripts, the ingot Service (port 8080) at
      # an address they reach, e.g. http://<address>:8080.
      ipxeBaseUrl: ""
HEADER
  echo "  chartContent: $chart_archive"
} >deploy/harvester/helmchart.yaml
