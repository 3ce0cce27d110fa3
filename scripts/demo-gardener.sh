#!/usr/bin/env bash
# The Gardener machine controller on the local default: a real control plane, Gardener's
# machine.sapcloud.io CRDs, upstream machine-controller-manager (built from its Go module) for
# the MachineSets and MachineDeployments, `ingot run --controllers gardener` as the machine
# controller for Equinix Metal, the Metal emulator and the booting servers (their kubelets join
# with the bootstrap token of their user data). Applies the provider's sample machine class
# and secret (credentials filled) and its sample MachineDeployment (3 machines), then prints
# `kubectl get machinedeployment,machineset,machine,node` (full resource names: another CRD here also has `machines`).
# Everything keeps running in the background; `scripts/demo-gardener.sh down` stops it by PID.
#   usage: scripts/demo-gardener.sh [up|down|status]
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$INGOT_ROOT"
state="$INGOT_ROOT/.ingot/demo-gardener"
command=${1:-up}
parts=(ingot mcm boot metal control-plane)

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
  *) echo "usage: scripts/demo-gardener.sh [up|down|status]" >&2; exit 2 ;;
esac

build_control_plane
build_mcm
build_kubectl
log "building ingot"
cargo build --locked -p ingot -p ingot-testenv -p ingot-sim
bin="$CARGO_TARGET_DIR/debug"

for name in "${parts[@]}"; do stop_pid_file "$name"; done
rm -rf "$state"
mkdir -p "$state"

log "starting the control plane on loopback"
"$bin/ingot-testenv" up --dir "$state/control-plane" >"$state/control-plane.log" 2>&1 &
echo $! >"$state/control-plane.pid"
for _ in $(seq 1 900); do
  [[ -f "$state/control-plane/ready" ]] && break
  kill -0 "$(cat "$state/control-plane.pid")" 2>/dev/null || { cat "$state/control-plane.log" >&2; exit 1; }
  sleep 0.1
done
[[ -f "$state/control-plane/ready" ]] || { cat "$state/control-plane.log" >&2; exit 1; }
export KUBECONFIG="$state/control-plane/kubeconfig"
kubectl() { "$INGOT_KUBECTL" "$@"; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
metal_port=$(free_port)
http_port=$(free_port)
mcm_port=$(free_port)
# The project of the provider's sample machine class.
project=e3db5484-f789-43e1-8aea-a1921cae50dd
metal_token="demo-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"

log "starting the Equinix Metal emulator on 127.0.0.1:$metal_port"
INGOT_SIM_METAL_TOKEN="$metal_token" "$bin/ingot-sim" metal --listen "127.0.0.1:$metal_port" \
  --project "$project" --timings "${INGOT_DEMO_TIMINGS:-instant}" >"$state/metal.log" 2>&1 &
echo $! >"$state/metal.pid"

log "starting the booting servers (Gardener user data: they join with its bootstrap token)"
# The join token and URL are the Harvester installer's; Gardener devices do not use them.
export INGOT_DEMO_UNUSED_JOIN_TOKEN=unused
INGOT_SIM_METAL_TOKEN="$metal_token" "$bin/ingot-sim" boot --metal-url "http://127.0.0.1:$metal_port/metal/v1" \
  --project "$project" --kubeconfig "$KUBECONFIG" --join-token-env INGOT_DEMO_UNUSED_JOIN_TOKEN \
  --server-url "https://10.53.0.100" >"$state/boot.log" 2>&1 &
echo $! >"$state/boot.pid"

log "starting upstream machine-controller-manager (log: $state/mcm.log)"
"$INGOT_MCM_BIN/machine-controller-manager" --control-kubeconfig "$KUBECONFIG" --target-kubeconfig "$KUBECONFIG" \
  --namespace default --address 127.0.0.1 --port "$mcm_port" --leader-elect=false >"$state/mcm.log" 2>&1 &
echo $! >"$state/mcm.pid"

log "starting the operator as the machine controller (log: $state/ingot.log)"
"$bin/ingot" run --controllers gardener --kubeconfig "$KUBECONFIG" --http-addr "127.0.0.1:$http_port" \
  --namespace default --lease-namespace default \
  --metal-api-url "http://127.0.0.1:$metal_port/metal/v1" >"$state/ingot.log" 2>&1 &
echo $! >"$state/ingot.pid"

shared=${INGOT_SHARED_DIR:-$INGOT_ROOT/../shared}
samples="$shared/fixtures/mcm-provider-samples"
[[ -d "$samples" ]] || { echo "$samples not found: set INGOT_SHARED_DIR to the shared documents" >&2; exit 1; }
log "applying the provider's machine class (first one; the retired plan and OS swapped for current ones)"
awk '/^---/{exit} {print}' "$samples/machine-class.yaml" \
  | sed -e 's/OS: alpine_3/OS: ubuntu_22_04/' -e 's/t1\.small\.x86/c3.small.x86/' >"$state/machine-class.yaml"
kubectl apply -f "$state/machine-class.yaml"
log "applying the provider's secret, credentials filled and Gardener-style user data"
sed -e "s/my-super-secret-equinix-metal-api-key/$metal_token/" \
  -e 's|echo "I am user data"|echo "<<BOOTSTRAP_TOKEN>>" > /var/lib/gardener-node-agent/credentials/bootstrap-token|' \
  "$samples/secret.yaml" >"$state/secret.yaml"
kubectl apply -f "$state/secret.yaml"
log "applying the provider's sample MachineDeployment (3 machines)"
# Its template carries `class.namespace`, which the CRD does not declare: the server prunes it.
kubectl apply --validate=false -f "$samples/machine-deployment.yaml"
log "waiting for 3 Running machines"
for _ in $(seq 1 600); do
  [[ "$(kubectl get machines.machine.sapcloud.io -o jsonpath='{range .items[*]}{.status.currentStatus.phase}{"\n"}{end}' | grep -c '^Running$')" == 3 ]] && break
  sleep 0.5
done

log "kubectl get machinedeployment,machineset,machine,node"
kubectl get machinedeployments.machine.sapcloud.io,machinesets.machine.sapcloud.io,machines.machine.sapcloud.io -o wide
kubectl get nodes
cat <<TXT

The control plane, the Metal emulator, the booting servers, MCM and the operator keep running:
  export KUBECONFIG=$KUBECONFIG
  $INGOT_KUBECTL scale machinedeployments.machine.sapcloud.io eqx-test-machine-deployment --replicas=5
  scripts/demo-gardener.sh down        # stops them
TXT
