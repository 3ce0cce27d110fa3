#!/usr/bin/env bash
# Builds ingot's container image as an OCI image layout (no container daemon needed):
#   scripts/build-image.sh [OUT_DIR]      default: $INGOT_CACHE_DIR/image/ingot-<version>
# The binary is a release build (INGOT_IMAGE_BINARY overrides it). Load the layout with any
# OCI tool, e.g. `skopeo copy oci:OUT_DIR:<version> docker://<your registry>/ingot:<version>`.
source "$(dirname "$0")/lib.sh"
cd "$INGOT_ROOT"
version=$(awk -F'"' '/^version = / {print $2; exit}' Cargo.toml)
out=${1:-$INGOT_CACHE_DIR/image/ingot-$version}
binary=${INGOT_IMAGE_BINARY:-}
if [[ -z $binary ]]; then
  log "building the release binary"
  cargo build --release --locked -p ingot --bin ingot
  binary="$CARGO_TARGET_DIR/release/ingot"
fi
# The test-only crash points (cargo feature `crash-points`) never go into the image.
if grep -qa 'INGOT_CRASH_POINT' "$binary"; then
  echo "error: $binary was built with the test-only crash-points feature; build it without (cargo build --release -p ingot --bin ingot)" >&2
  exit 1
fi
revision=$(git rev-parse HEAD 2>/dev/null || true)
python3 scripts/oci_image.py --binary "$binary" --out "$out" --version "$version" --revision "$revision" >/dev/null
echo "$out"
