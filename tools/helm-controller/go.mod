// The helm-controller module (the controller RKE2, and so Harvester, embeds) whose HelmChart CRD
// (helm.cattle.io/v1) the tests install to check deploy/harvester/helmchart.yaml. Nothing is
// built from it.
module ingot.invalid/tools/helm-controller

go 1.25.0

require github.com/k3s-io/helm-controller v0.16.27
