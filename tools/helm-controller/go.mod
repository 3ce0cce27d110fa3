// The helm-controller module whose HelmChart CRD (helm.cattle.io/v1, as RKE2 and so Harvester
// run it) the tests install to check deploy/harvester/helmchart.yaml. Nothing is built from it.
module ingot.invalid/tools/helm-controller

go 1.25.0

require github.com/k3s-io/helm-controller v0.16.27
