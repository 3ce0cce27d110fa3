#!/usr/bin/env bash
# Tests of the IPMI client and the lanplus BMC emulator against the real
# peers: OpenIPMI ipmi_sim, pyghmi's fakebmc and ipmitool, installed here.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
install_apt_packages
install_python_packages
cd "$INGOT_ROOT"
log "cargo test -p ingot-ipmi -p ingot-ipmi-sim"
cargo test -p ingot-ipmi -p ingot-ipmi-sim "$@"
