#!/usr/bin/env bash
# ingot's main job on the local default: a real control plane (etcd, kube-apiserver,
# kube-controller-manager built from Go modules), the Equinix Metal emulator, the servers that
# boot (a companion that follows their iPXE script and joins them as Nodes), the operator, and
# the seed's sample InstancePool, taken to `ready`; ends by printing
# `kubectl get instancepool,instance`.
# Everything keeps running in the background; `scripts/demo.sh down` stops it by PID.
#   usage: scripts/demo.sh [up|down|status]
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$INGOT_ROOT"
state="$INGOT_ROOT/.ingot/demo"
command=${1:-up}

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
    stop_pid_file ingot
    stop_pid_file boot
    stop_pid_file metal
    stop_pid_file control-plane
    log "stopped"
    exit 0
    ;;
  status)
    for name in control-plane metal boot ingot; do
      if [[ -f "$state/$name.pid" ]] && kill -0 "$(cat "$state/$name.pid")" 2>/dev/null; then echo "$name: running (pid $(cat "$state/$name.pid"))"; else echo "$name: stopped"; fi
    done
    exit 0
    ;;
  up) ;;
  *) echo "usage: scripts/demo.sh [up|down|status]" >&2; exit 2 ;;
esac

install_apt_packages
build_control_plane
build_kubectl
log "building ingot"
cargo build --locked -p ingot -p ingot-testenv -p ingot-sim
bin="$CARGO_TARGET_DIR/debug"

# A clean start: stop what an earlier run left, by the PIDs it recorded.
stop_pid_file ingot
stop_pid_file boot
stop_pid_file metal
stop_pid_file control-plane
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
project=8f3a0bd2-5c4e-4d7a-9b1e-3c2d1e0f9a87
metal_token="demo-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
export INGOT_DEMO_JOIN_TOKEN="join-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
cluster_vip=10.53.0.100

log "starting the Equinix Metal emulator on 127.0.0.1:$metal_port"
INGOT_SIM_METAL_TOKEN="$metal_token" "$bin/ingot-sim" metal --listen "127.0.0.1:$metal_port" \
  --project "$project" --timings "${INGOT_DEMO_TIMINGS:-instant}" >"$state/metal.log" 2>&1 &
echo $! >"$state/metal.pid"

log "the Secret and the cluster VIP the operator reads, as on a Harvester cluster"
kubectl create namespace harvester-system >/dev/null
kubectl -n harvester-system create secret generic equinix-addon \
  --from-literal=METAL_AUTH_TOKEN="$metal_token" --from-literal=PROJECT_ID="$project" >/dev/null
kubectl -n kube-system create service loadbalancer ingress-expose --tcp=443:443 >/dev/null
kubectl -n kube-system patch service ingress-expose --subresource=status --type=merge \
  -p "{\"status\":{\"loadBalancer\":{\"ingress\":[{\"ip\":\"$cluster_vip\"}]}}}" >/dev/null

log "starting the booting servers (they join as Nodes when their install config is right)"
INGOT_SIM_METAL_TOKEN="$metal_token" "$bin/ingot-sim" boot --metal-url "http://127.0.0.1:$metal_port/metal/v1" \
  --project "$project" --kubeconfig "$KUBECONFIG" --join-token-env INGOT_DEMO_JOIN_TOKEN \
  --server-url "https://$cluster_vip" >"$state/boot.log" 2>&1 &
echo $! >"$state/boot.pid"

log "starting the operator (log: $state/ingot.log)"
TOKEN="$INGOT_DEMO_JOIN_TOKEN" "$bin/ingot" run --kubeconfig "$KUBECONFIG" --http-addr "127.0.0.1:$http_port" \
  --lease-namespace default --metal-api-url "http://127.0.0.1:$metal_port/metal/v1" \
  --ipxe-base-url "http://127.0.0.1:$http_port" --metal-poll-seconds 1 >"$state/ingot.log" 2>&1 &
echo $! >"$state/ingot.pid"

log "applying the sample InstancePool of the harvester-equinix-addon README"
shared=${INGOT_SHARED_DIR:-$INGOT_ROOT/../shared}
readme="$shared/seeds/harvester-equinix-addon-README.md"
[[ -f "$readme" ]] || { echo "$readme not found: set INGOT_SHARED_DIR to the shared documents" >&2; exit 1; }
# The README's only fenced YAML block is the sample pool; it is applied unchanged.
awk '/^```yaml/{on=1; next} /^```/{on=0} on' "$readme" >"$state/instancepool.yaml"
kubectl apply -f "$state/instancepool.yaml"
log "waiting for the pool to become ready (servers are created, installed and join)"
for _ in $(seq 1 600); do
  [[ "$(kubectl get instancepool harvester-pxe-worker -o jsonpath='{.status.status}')" == ready ]] && break
  sleep 0.5
done

log "kubectl get instancepool,instance"
kubectl get instancepool,instance
kubectl get nodes
cat <<TXT

The control plane, the Metal emulator, the booting servers and the operator keep running:
  export KUBECONFIG=$KUBECONFIG
  $INGOT_KUBECTL get instancepool,instance
  scripts/demo.sh down        # stops them
TXT
