#!/usr/bin/env bash
# Coverage-guided fuzzing of the decoders of what BMCs, the Equinix Metal API and manifests send
# ingot (fuzz/, libFuzzer through cargo-fuzz; docs/fuzzing.md lists the targets). Installs
# cargo-fuzz (cached), writes the seed corpora with the crates' own encoders, builds the targets
# and runs them one at a time under `nice`, then prints executions and executions per second.
#   usage: scripts/fuzz.sh [--runs N | --seconds S] [TARGET...]   the long run (default: every
#                                                                target, 10,000,000 executions)
#          scripts/fuzz.sh --smoke                               every target for 5 s (scripts/test.sh)
#          scripts/fuzz.sh --list
# The corpus each target grows is kept in the cache directory (fuzz/corpus/TARGET) and reused by
# the next run. A crash (a panic, or a property a target asserts) stops the run with the input
# that caused it in fuzz/artifacts/TARGET/ of the cache directory: replay it with
# `RUSTC_BOOTSTRAP=1 cargo fuzz run -s none -a TARGET FILE` and add it as a regression test.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$INGOT_ROOT"

limit=(-runs=10000000)
targets=()
while (($#)); do
  case $1 in
    --runs) limit=("-runs=$2"); shift 2 ;;
    --seconds) limit=("-max_total_time=$2"); shift 2 ;;
    --smoke) limit=(-max_total_time=5); shift ;;
    --list) sed -n 's/^name = "\(.*\)"$/\1/p' fuzz/Cargo.toml | grep -v '^ingot-fuzz$'; exit 0 ;;
    -h | --help) sed -n '2,15p' "$0"; exit 0 ;;
    -*) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
all=$("$0" --list)
((${#targets[@]})) || mapfile -t targets <<<"$all"
for t in "${targets[@]}"; do
  grep -qx "$t" <<<"$all" || { echo "no fuzz target $t; the targets are: $(echo $all)" >&2; exit 2; }
done

install_cargo_tools
work="$INGOT_CACHE_DIR/fuzz"
mkdir -p "$work"

log "seed corpora (the crates' fuzz_seeds tests, from their own encoders)"
seeds="$work/seeds"
rm -rf "$seeds"
INGOT_FUZZ_SEEDS="$seeds" cargo test --locked -q -p ingot-ipmi -p ingot-bmc -p ingot-metal \
  --test fuzz_seeds >/dev/null
# Go durations and maxUnhealthy values as manifests write them.
mkdir -p "$seeds/go_duration" "$seeds/max_unhealthy"
for d in 5m 1h30m 20m0s 1.5h 250ms 10µs 2h45m30.5s; do printf '%s' "$d" >"$seeds/go_duration/$d"; done
for m in 1 40% 100% 0; do printf '\x05\x00%s' "$m" >"$seeds/max_unhealthy/${m%\%}pct"; done

log "building the fuzz targets (release, coverage instrumentation, debug assertions)"
# cargo-fuzz passes libFuzzer's instrumentation flags, which a stable toolchain takes only with
# RUSTC_BOOTSTRAP; no sanitizer (-s none): the targets are safe Rust.
export RUSTC_BOOTSTRAP=1
fuzz_target_dir="$CARGO_TARGET_DIR/fuzz"
cargo fuzz build -s none -a --target-dir "$fuzz_target_dir"
bin="$fuzz_target_dir/x86_64-unknown-linux-gnu/release"

summary=()
for t in "${targets[@]}"; do
  corpus="$work/corpus/$t" artifacts="$work/artifacts/$t"
  mkdir -p "$corpus" "$artifacts" "$seeds/$t"
  log "fuzzing $t (${limit[*]})"
  out="$work/$t.log"
  status=0
  nice -n 19 "$bin/$t" "$corpus" "$seeds/$t" "${limit[@]}" -max_len=4096 -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts/" >"$out" 2>&1 || status=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$out" | tail -1)
  if ((status != 0)); then
    tail -n 40 "$out" >&2
    echo "fuzz target $t failed (exit $status); the input is in $artifacts/, the log in $out" >&2
    exit 1
  fi
  summary+=("$(printf '%-18s %12s executions %8s exec/s  corpus %s' "$t" "${runs:-?}" "${rate:-?}" \
    "$(find "$corpus" -type f | wc -l)")")
done
log "no crash"
printf '%s\n' "${summary[@]}"
