#!/usr/bin/env bash
# Regenerates deploy/helm/ingot/crds/ from the types in crates/api (one file per CRD).
source "$(dirname "$0")/lib.sh"
cd "$INGOT_ROOT"
rm -f deploy/helm/ingot/crds/*.yaml
cargo run -q -p ingot-api --example write-crds -- deploy/helm/ingot/crds
