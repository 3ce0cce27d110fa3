#!/usr/bin/env bash
# ingot's main job on the local default: a real control plane (etcd, kube-apiserver,
# kube-controller-manager built from Go modules), ingot's CRDs, the operator, and the seed's
# sample InstancePool; ends by printing `kubectl get instancepool,instance`.
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
    stop_pid_file control-plane
    log "stopped"
    exit 0
    ;;
  status)
    for name in control-plane ingot; do
      if [[ -f "$state/$name.pid" ]] && kill -0 "$(cat "$state/$name.pid")" 2>/dev/null; then echo "$name: running (pid $(cat "$state/$name.pid"))"; else echo "$name: stopped"; fi
    done
    exit 0
    ;;
  up) ;;
  *) echo "usage: scripts/demo.sh [up|down|status]" >&2; exit 2 ;;
esac

install_apt_packages
build_control_plane
find_kubectl
log "building ingot"
cargo build --locked -p ingot -p ingot-testenv
bin="$CARGO_TARGET_DIR/debug"

# A clean start: stop what an earlier run left, by the PIDs it recorded.
stop_pid_file ingot
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

log "starting the operator (log: $state/ingot.log)"
"$bin/ingot" run --kubeconfig "$KUBECONFIG" --http-addr 127.0.0.1:0 --lease-namespace default >"$state/ingot.log" 2>&1 &
echo $! >"$state/ingot.pid"

log "applying the sample InstancePool of the harvester-equinix-addon README"
shared=${INGOT_SHARED_DIR:-$INGOT_ROOT/../shared}
readme="$shared/seeds/harvester-equinix-addon-README.md"
[[ -f "$readme" ]] || { echo "$readme not found: set INGOT_SHARED_DIR to the shared documents" >&2; exit 1; }
# The README's only fenced YAML block is the sample pool; it is applied unchanged.
awk '/^```yaml/{on=1; next} /^```/{on=0} on' "$readme" >"$state/instancepool.yaml"
kubectl apply -f "$state/instancepool.yaml"
for _ in $(seq 1 100); do
  [[ -n "$(kubectl get instancepool harvester-pxe-worker -o jsonpath='{.status.observedGeneration}')" ]] && break
  sleep 0.2
done

log "kubectl get instancepool,instance"
kubectl get instancepool,instance
kubectl get instancepool harvester-pxe-worker -o jsonpath='{range .status.conditions[*]}{.type}={.status} ({.reason}): {.message}{"\n"}{end}'
cat <<TXT

The control plane and the operator keep running:
  export KUBECONFIG=$KUBECONFIG
  $INGOT_KUBECTL get instancepool,instance
  scripts/demo.sh down        # stops them
TXT
