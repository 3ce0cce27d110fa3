#!/usr/bin/env bash
# The whole test suite, on a fresh machine or a warm one: installs what the tests need
# (idempotent, cached outside the repository), builds the control plane from Go modules, checks
# formatting and lints, then runs every test against one real control plane for the run.
#   usage: scripts/test.sh [extra cargo test arguments]
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$INGOT_ROOT"

install_apt_packages
install_python_packages
install_qemu_peer
build_control_plane
build_mcm
build_rufio
build_helm
build_kubectl

log "cargo fmt --check"
cargo fmt --all --check
# The tests' binary has the test-only crash points (`--crash-point`); the one the image ships
# does not. Built first, as shipped, and kept aside for the test that checks it refuses them.
test_features=(--features ingot/crash-points)
log "cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets --locked "${test_features[@]}" -- -D warnings
log "building ingot as shipped (no test features)"
cargo test --locked -p ingot --no-run --test startup
mkdir -p "$CARGO_TARGET_DIR/shipped"
cp "$CARGO_TARGET_DIR/debug/ingot" "$CARGO_TARGET_DIR/shipped/ingot"
export INGOT_SHIPPED_BINARY="$CARGO_TARGET_DIR/shipped/ingot" INGOT_FULL_SUITE=1
log "building the tests"
cargo test --workspace --locked --no-run "${test_features[@]}"
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
cargo test --workspace --locked --no-fail-fast "${test_features[@]}" "$@"
log "least privilege: every permission of the chart was used by the tests above, none refused"
cargo test --locked -p ingot --features crash-points --test rbac_coverage -- --ignored
# Every fuzz target for a few seconds on its seed corpus (scripts/fuzz.sh is the long run).
"$INGOT_ROOT/scripts/fuzz.sh" --smoke
