#!/usr/bin/env bash
# Seeder's full mode on the local default: a Cluster of three servers provisioned end to end.
# A real control plane (as scripts/demo.sh starts it), `ingot run --controllers provisioning`
# with its boot server, three servers behind emulated Redfish BMCs (`ingot-sim servers`: 5 s
# power transitions, a 30 s install) that PXE-boot from ingot, check their install config, call
# the installer's webhook and reboot from disk, and a second control plane bound to the
# Cluster's VIP that plays the new cluster (bootstrap-token auth, as RKE2). Applies the sample
# of Seeder's README (adjusted as below), waits for `clusterRunning`, then prints
# `kubectl get clusters,inventories,addresspools` and the new cluster's Nodes.
# Everything keeps running in the background; `scripts/demo-provision.sh down` stops it by PID.
#   usage: scripts/demo-provision.sh [up|down|status]
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$INGOT_ROOT"
state="$INGOT_ROOT/.ingot/demo-provision"
command=${1:-up}
parts=(ingot servers cluster control-plane)
# The sample's addresses moved from 172.16.0.0/16 to 127.16.0.0/16: the same hosts, on loopback.
vip=127.16.128.7

stop_pid_file() { # name
  local file="$state/$1.pid" pid
  [[ -f "$file" ]] || return 0
  pid=$(cat "$file")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -f "$file"
}

case "$command" in
  down)
    for name in "${parts[@]}"; do stop_pid_file "$name"; done
    log "stopped"
    exit 0
    ;;
  status)
    for name in "${parts[@]}"; do
      if [[ -f "$state/$name.pid" ]] && kill -0 "$(cat "$state/$name.pid")" 2>/dev/null; then echo "$name: running (pid $(cat "$state/$name.pid"))"; else echo "$name: stopped"; fi
    done
    exit 0
    ;;
  up) ;;
  *) echo "usage: scripts/demo-provision.sh [up|down|status]" >&2; exit 2 ;;
esac

shared=${INGOT_SHARED_DIR:-$INGOT_ROOT/../shared}
readme="$shared/fixtures/seeder-full-mode/README.md"
[[ -f "$readme" ]] || { echo "$readme not found: set INGOT_SHARED_DIR to the shared documents" >&2; exit 1; }
build_control_plane
build_kubectl
log "building ingot"
cargo build --locked -p ingot -p ingot-testenv -p ingot-sim
bin="$CARGO_TARGET_DIR/debug"

# A clean start: stop what an earlier run left, by the PIDs it recorded.
for name in "${parts[@]}"; do stop_pid_file "$name"; done
rm -rf "$state"
mkdir -p "$state"

start_control_plane() { # name, ingot-testenv up options...
  local name=$1; shift
  "$bin/ingot-testenv" up --dir "$state/$name" "$@" >"$state/$name.log" 2>&1 &
  echo $! >"$state/$name.pid"
  for _ in $(seq 1 900); do
    [[ -f "$state/$name/ready" ]] && return 0
    kill -0 "$(cat "$state/$name.pid")" 2>/dev/null || break
    sleep 0.1
  done
  cat "$state/$name.log" >&2
  exit 1
}
log "starting the control plane on loopback"
start_control_plane control-plane
log "starting the new cluster's API server at the VIP $vip (bootstrap tokens, as RKE2)"
start_control_plane cluster --bind-address "$vip" --bootstrap-token-auth --no-controller-manager --no-crds
export KUBECONFIG="$state/control-plane/kubeconfig"
kubectl() { "$INGOT_KUBECTL" "$@"; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
http_port=$(free_port)
boot_port=$(free_port)

log "starting three servers behind emulated Redfish BMCs (the README's BMC credentials)"
"$bin/ingot-sim" servers --count 3 --boot-url "http://127.0.0.1:$boot_port/boot" \
  --target-kubeconfig "$state/cluster/kubeconfig" --user ADMIN --password ADMIN \
  --out "$state/servers.json" >/dev/null 2>"$state/servers.log" &
echo $! >"$state/servers.pid"
for _ in $(seq 1 100); do [[ -f "$state/servers.json" ]] && break; sleep 0.1; done
[[ -f "$state/servers.json" ]] || { cat "$state/servers.log" >&2; exit 1; }
field() { sed -n "$(($1 + 1))p" "$state/servers.json" | python3 -c "import json,sys; print(json.load(sys.stdin)['$2'])"; }

log "starting the operator with its boot server on 127.0.0.1:$boot_port (log: $state/ingot.log)"
"$bin/ingot" run --controllers provisioning --kubeconfig "$KUBECONFIG" --http-addr "127.0.0.1:$http_port" \
  --lease-namespace default --boot-addr "127.0.0.1:$boot_port" --boot-url "http://127.0.0.1:$boot_port" \
  >"$state/ingot.log" 2>&1 &
echo $! >"$state/ingot.pid"

log "applying the sample of Seeder's README, adjusted for a local run"
# The README's first fenced block: its AddressPools, Secrets, Inventories and Cluster. Changed:
# - addresses 172.16.x.y become 127.16.x.y: the servers fetch their install config from their
#   own address, which must be a loopback one here, and the VIP's API server listens on one;
# - each Inventory's BMC (host 172.16.1.5x, port 623) is an emulated BMC's HTTPS URL, and its
#   MAC the emulated server's (the boot server knows a server by the MAC it boots with);
# - version v1.0.2 becomes v1.7.1: ingot installs Harvester v1.1 and later only;
# - the Cluster gets Seeder's label clusterPort.harvesterhci.io: the VIP's API server listens on
#   a free port, not 6443;
# - a third node (node3, its pool node3-pool of one address, its Secret) is added as the others.
cluster_port=$(sed 's/.*://' "$state/cluster/ready")
awk '/^```/ { if (on) exit; on = 1; next } on' "$readme" | sed \
  -e "s|host: \"172.16.1.53\"|host: \"$(field 0 bmc)\"|" -e "s|0c:c4:7a:6b:84:20|$(field 0 mac)|" \
  -e "s|host: \"172.16.1.52\"|host: \"$(field 1 bmc)\"|" -e "s|0c:c4:7a:6b:80:d0|$(field 1 mac)|" \
  -e 's|172\.16\.|127.16.|g' -e 's|version: "v1.0.2"|version: "v1.7.1"|' \
  -e "s|^  name: first\$|&\n  labels:\n    clusterPort.harvesterhci.io: \"$cluster_port\"|" \
  -e 's|^  vipConfig:$|    - inventoryReference:\n        name: node3\n        namespace: default\n      addressPoolReference:\n        name: node3-pool\n        namespace: default\n&|' \
  >"$state/cluster.yaml"
cat >>"$state/cluster.yaml" <<YAML
---
apiVersion: metal.harvesterhci.io/v1alpha1
kind: AddressPool
metadata: {name: node3-pool, namespace: default}
spec: {cidr: "127.16.128.13/32", gateway: "127.16.128.1", netmask: "255.255.248.0"}
---
apiVersion: v1
kind: Secret
metadata: {name: node3, namespace: default}
stringData: {username: "ADMIN", password: "ADMIN"}
---
apiVersion: metal.harvesterhci.io/v1alpha1
kind: Inventory
metadata: {name: node3, namespace: default}
spec:
  primaryDisk: "/dev/sda"
  managementInterfaceMacAddress: "$(field 2 mac)"
  baseboardSpec:
    connection: {host: "$(field 2 bmc)", port: 623, insecureTLS: true, authSecretRef: {name: node3, namespace: default}}
YAML
kubectl apply -f "$state/cluster.yaml"

log "waiting for clusterRunning (each server: power cycle, PXE boot, install, reboot, join)"
for _ in $(seq 1 600); do
  [[ "$(kubectl get clusters.metal.harvesterhci.io first -o jsonpath='{.status.status}')" == clusterRunning ]] && break
  sleep 1
done
log "kubectl get clusters,inventories,addresspools"
kubectl get clusters,inventories,addresspools
log "the new cluster's Nodes (the API server at the VIP)"
kubectl --kubeconfig "$state/cluster/kubeconfig" get nodes -o wide
[[ "$(kubectl get clusters.metal.harvesterhci.io first -o jsonpath='{.status.status}')" == clusterRunning ]] ||
  { echo "the Cluster is not running after 10 minutes: see $state/ingot.log and $state/servers.log" >&2; exit 1; }
cat <<TXT

The control planes, the servers and the operator keep running:
  export KUBECONFIG=$KUBECONFIG
  $INGOT_KUBECTL get clusters,inventories,addresspools
  $INGOT_KUBECTL --kubeconfig $state/cluster/kubeconfig get nodes
  scripts/demo-provision.sh down        # stops them
TXT
