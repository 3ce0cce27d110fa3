#!/usr/bin/env bash
# The whole test suite, on a fresh machine or a warm one: installs what the tests need
# (idempotent, cached outside the repository), builds the control plane from Go modules, checks
# formatting and lints, then runs every test against one real control plane for the run.
#   usage: scripts/test.sh [extra cargo test arguments]
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$INGOT_ROOT"

install_apt_packages
install_python_packages
build_control_plane
build_mcm
build_rufio
build_helm
build_kubectl

log "cargo fmt --check"
cargo fmt --all --check
log "cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings
log "building the tests"
cargo test --workspace --locked --no-run
cargo build --locked -p ingot-testenv

state=$(mktemp -d "${TMPDIR:-/tmp}/ingot-test.XXXXXX")
log "starting the control plane (etcd, kube-apiserver, kube-controller-manager) on loopback"
"$CARGO_TARGET_DIR/debug/ingot-testenv" up --dir "$state" >"$state/testenv.out" 2>&1 &
testenv_pid=$!
stop_control_plane() {
  kill -TERM "$testenv_pid" 2>/dev/null || true
  wait "$testenv_pid" 2>/dev/null || true
  rm -rf "$state"
}
trap stop_control_plane EXIT
for _ in $(seq 1 600); do
  [[ -f "$state/ready" ]] && break
  if ! kill -0 "$testenv_pid" 2>/dev/null; then cat "$state/testenv.out" >&2; exit 1; fi
  sleep 0.1
done
[[ -f "$state/ready" ]] || { cat "$state/testenv.out" >&2; echo "the control plane did not start" >&2; exit 1; }
cat "$state/testenv.out"
export INGOT_TESTENV_KUBECONFIG="$state/kubeconfig"

log "cargo test --workspace"
cargo test --workspace --locked --no-fail-fast "$@"
log "least privilege: every permission of the chart was used by the tests above, none refused"
cargo test --locked -p ingot --test rbac_coverage -- --ignored
# Every fuzz target for a few seconds on its seed corpus (scripts/fuzz.sh is the long run).
"$INGOT_ROOT/scripts/fuzz.sh" --smoke
