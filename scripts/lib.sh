# Shared by the scripts: cache locations and idempotent installation of what ingot needs.
# Everything built or installed lives outside the repository, keyed by version.
set -euo pipefail
INGOT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export INGOT_CACHE_DIR=${INGOT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ingot}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$INGOT_CACHE_DIR/target}
mkdir -p "$INGOT_CACHE_DIR"

# Each step with the time it starts (UTC), so a run's log shows where its time went.
log() { printf '\033[1m==> %s %s\033[0m\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

# Debian packages from scripts/deps/apt.txt (`package=version`, one a line) at exactly the recorded
# versions: installs the missing ones (apt-get runs only then), then checks every installed version.
install_apt_packages() {
  local record="$INGOT_ROOT/scripts/deps/apt.txt" entries entry pkg version installed missing=() failed=0
  entries=$(grep -vE '^\s*(#|$)' "$record" || true)
  for entry in $entries; do
    pkg=${entry%%=*} version=${entry#*=}
    if [[ $pkg == "$entry" || -z $pkg || -z $version ]]; then
      echo "scripts/deps/apt.txt: '$entry' is not package=version" >&2
      return 1
    fi
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg=$version")
  done
  if ((${#missing[@]})); then
    log "installing Debian packages: ${missing[*]}"
    local sudo=""; [[ $(id -u) -eq 0 ]] || sudo=sudo
    $sudo apt-get update -qq || return 1
    if ! DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null; then
      echo "could not install ${missing[*]} (the versions recorded in scripts/deps/apt.txt); if the" \
        "archive no longer has them, record versions it has (apt-cache policy PACKAGE)" >&2
      return 1
    fi
  fi
  for entry in $entries; do
    pkg=${entry%%=*} version=${entry#*=}
    installed=$(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null || true)
    if [[ $installed != "$version" ]]; then
      echo "Debian package $pkg: scripts/deps/apt.txt records $version but ${installed:-nothing} is installed;" \
        "install the recorded version (apt-get install $pkg=$version) or, to use the installed one," \
        "update the record to the line printed by: dpkg-query -W -f='\${Package}=\${Version}\\n' $pkg" >&2
      failed=1
    fi
  done
  return "$failed"
}

# A virtualenv with every Python package at the version and hash scripts/deps/requirements.lock
# records (dependencies included; scripts/deps/lock-python.sh regenerates it from
# requirements.txt), keyed by that lock and the Python version, put first on PATH.
install_python_packages() {
  local req="$INGOT_ROOT/scripts/deps/requirements.txt" lock="$INGOT_ROOT/scripts/deps/requirements.lock" stale key venv
  # A pin in requirements.txt that the lock lacks means the lock was not regenerated.
  stale=$(awk -F'==' 'function norm(s) { s = tolower(s); gsub(/[ \t]/, "", s); gsub(/[-_.]+/, "-", s); return s }
    /^[ \t]*(#|-|$)/ { next }
    { sub(/[ \t\\].*/, "", $2) }
    FNR == NR { locked[norm($1) "==" $2]; next }
    !((norm($1) "==" $2) in locked) { print $1 "==" $2 }' "$lock" "$req")
  if [[ -n $stale ]]; then
    echo "scripts/deps/requirements.lock lacks $(echo "$stale" | tr '\n' ' ')from requirements.txt: run scripts/deps/lock-python.sh" >&2
    return 1
  fi
  key=$( (python3 --version; cat "$lock") | sha256sum | cut -c1-12)
  venv="$INGOT_CACHE_DIR/venv-$key"
  if [[ ! -x "$venv/bin/python" ]] || [[ ! -f "$venv/.complete" ]]; then
    log "creating the Python virtualenv for the test peers"
    # Each step returns on failure itself: errexit does not apply when the caller tests the result.
    rm -rf "$venv"
    python3 -m venv "$venv" || return 1
    "$venv/bin/pip" install -q --require-hashes --no-deps -r "$lock" || return 1
    if ! "$venv/bin/pip" check >&2; then
      echo "scripts/deps/requirements.lock is incomplete: run scripts/deps/lock-python.sh" >&2
      return 1
    fi
    touch "$venv/.complete"
  fi
  export PATH="$venv/bin:$PATH"
}

# kube-apiserver, etcd and kube-controller-manager built from Go modules (cached by version).
build_control_plane() {
  log "control plane binaries (built from Go modules on first use; cached afterwards)"
  INGOT_K8S_BIN=$("$INGOT_ROOT/tools/k8s-testbin/build.sh")
  export INGOT_K8S_BIN
}

# Upstream Gardener machine-controller-manager built from its Go module (cached by version).
build_mcm() {
  log "machine-controller-manager (built from its Go module on first use; cached afterwards)"
  INGOT_MCM_BIN=$("$INGOT_ROOT/tools/mcm/build.sh")
  export INGOT_MCM_BIN
}

# The helm command built from the Helm release pinned in tools/helm (cached by version).
build_helm() {
  log "helm (built from its Go module on first use; cached afterwards)"
  INGOT_HELM=$("$INGOT_ROOT/tools/helm/build.sh")
  export INGOT_HELM
}

# kubectl built from the same k8s.io/kubernetes release as the control plane (tools/k8s-testbin,
# cached by version). The machine's own kubectl, if any, is not used.
build_kubectl() {
  log "kubectl (built from the control plane's Kubernetes release on first use; cached afterwards)"
  INGOT_KUBECTL=$("$INGOT_ROOT/tools/k8s-testbin/build.sh" kubectl)
  export INGOT_KUBECTL
}

# Upstream Tinkerbell Rufio's manager built from its Go module (v0.6.5, and v0.3.2 as Harvester
# Seeder runs it), cached by version; the Rufio peer tests run them.
build_rufio() {
  log "upstream rufio binaries (built from Go modules on first use; cached afterwards)"
  INGOT_RUFIO_BIN=$("$INGOT_ROOT/tools/rufio/build.sh" v0.6.5)
  INGOT_RUFIO_032_BIN=$("$INGOT_ROOT/tools/rufio/build.sh" v0.3.2)
  export INGOT_RUFIO_BIN INGOT_RUFIO_032_BIN
}

# Cargo subcommands from scripts/deps/cargo.txt (`crate=version`, one a line), each built once
# with `cargo install --locked` into its own directory of the cache, put first on PATH.
install_cargo_tools() {
  local record="$INGOT_ROOT/scripts/deps/cargo.txt" entry name version root
  for entry in $(grep -vE '^\s*(#|$)' "$record" || true); do
    name=${entry%%=*} version=${entry#*=}
    root="$INGOT_CACHE_DIR/cargo-tools/$name-$version"
    if [[ ! -f "$root/.complete" ]]; then
      log "building $name $version (first use only; cached afterwards)"
      # Its own target directory: the build shares nothing with the workspace's.
      CARGO_TARGET_DIR="$root.build" cargo install --quiet --locked --root "$root" "$name" --version "$version" || return 1
      rm -rf "$root.build"
      touch "$root/.complete"
    fi
    export PATH="$root/bin:$PATH"
  done
}

# The QEMU + iPXE peer of the provisioning tests: the Debian packages of scripts/deps/qemu.txt at
# exactly the recorded versions, fetched with `apt-get download` and unpacked with `dpkg-deb -x`
# into one directory of the cache keyed by that record (no root needed): qemu-system-x86_64 with
# its firmware (SeaBIOS, the iPXE ROMs of ipxe-qemu), the boot CD's programs (ISOLINUX, iPXE as
# a Linux kernel: boot-media/), the libraries it needs that the machine
# lacks (ldd), a Debian kernel (only the NIC's modules kept) and busybox-static. Exports
# INGOT_QEMU_DIR, which ingot-testenv's `qemu` module reads.
install_qemu_peer() {
  local record="$INGOT_ROOT/scripts/deps/qemu.txt" key dir work entry soname missing round
  key=$(sha256sum "$record" | cut -c1-12)
  dir="$INGOT_CACHE_DIR/qemu-$key"
  if [[ ! -f "$dir/.complete" ]]; then
    log "QEMU, iPXE, a Debian kernel and busybox for the boot tests (first use only; cached afterwards)"
    rm -rf "$dir" "$dir.work"
    mkdir -p "$dir" "$dir.work"
    work="$dir.work"
    for entry in $(grep -vE '^\s*(#|$|lib:|suite:)' "$record"); do
      _qemu_peer_unpack "$entry" "$dir" "$work" || return 1
    done
    # Packages of another Debian release: unpacked apart, their files picked below.
    local suite
    while read -r suite entry; do
      suite=${suite#suite:}
      _qemu_peer_unpack_from "$suite" "$entry" "$dir/$suite" "$work" || return 1
    done < <(grep -E '^suite:' "$record")
    # The libraries qemu-system-x86_64 and its TCG module need that neither the machine nor the
    # directory has: one round per level of dependencies.
    for round in 1 2 3 4 5; do
      missing=$(LD_LIBRARY_PATH="$dir/usr/lib/x86_64-linux-gnu:$dir/lib/x86_64-linux-gnu" \
        ldd "$dir/usr/bin/qemu-system-x86_64" "$dir/usr/lib/x86_64-linux-gnu/qemu/accel-tcg-x86_64.so" |
        awk '/=> not found/ { print $1 }' | sort -u)
      [[ -z $missing ]] && break
      for soname in $missing; do
        entry=$(awk -v lib="lib:$soname" '$1 == lib { print $2 }' "$record")
        if [[ -z $entry ]]; then
          echo "qemu-system-x86_64 needs $soname, which this machine lacks and scripts/deps/qemu.txt" \
            "does not provide: add a line 'lib:$soname PACKAGE=VERSION' (apt-cache policy PACKAGE)" >&2
          return 1
        fi
        _qemu_peer_unpack "$entry" "$dir" "$work" || return 1
      done
    done
    if [[ -n $missing ]]; then
      echo "qemu-system-x86_64 still lacks $missing after unpacking scripts/deps/qemu.txt's libraries" >&2
      return 1
    fi
    # Of the kernel's modules, only the virtio NIC's (the tests' initrd loads them).
    local modules
    modules=$(echo "$dir"/lib/modules/*)
    if [[ ! -d $modules/kernel ]]; then
      echo "the kernel package of scripts/deps/qemu.txt has no lib/modules/<version>/kernel" >&2
      return 1
    fi
    mv "$modules/kernel" "$work/kernel"
    mkdir -p "$modules/kernel/drivers/net" "$modules/kernel/net/core"
    mv "$work/kernel/drivers/virtio" "$modules/kernel/drivers/virtio"
    mv "$work/kernel/drivers/net/virtio_net.ko" "$work/kernel/drivers/net/net_failover.ko" "$modules/kernel/drivers/net/"
    mv "$work/kernel/net/core/failover.ko" "$modules/kernel/net/core/"
    rm -rf "$work" "$dir/usr/share/doc" "$dir/usr/share/man"
    if ! LD_LIBRARY_PATH="$dir/usr/lib/x86_64-linux-gnu:$dir/lib/x86_64-linux-gnu" \
      "$dir/usr/bin/qemu-system-x86_64" --version >/dev/null; then
      echo "the unpacked qemu-system-x86_64 in $dir does not run (its error is above)" >&2
      return 1
    fi
    # The boot CD's programs, as ingot run --boot-media-dir takes them.
    mkdir -p "$dir/boot-media"
    cp "$dir/usr/lib/ISOLINUX/isolinux.bin" "$dir/usr/lib/syslinux/modules/bios/ldlinux.c32" \
      "$dir/boot/ipxe.lkrn" "$dir/boot-media/" || return 1
    cp "$dir/trixie/usr/lib/ipxe/ipxe-amd64.efi" "$dir/boot-media/ipxe.efi" || return 1
    touch "$dir/.complete"
  fi
  export INGOT_QEMU_DIR="$dir"
}

# Fetches Debian package `name=version` of release $1 (e.g. trixie) and unpacks it into $3: apt-get
# with a package list of its own for that release, from the archive the machine's apt sources
# name, kept in $4 (the peer's work directory) and fetched once.
_qemu_peer_unpack_from() {
  local suite=$1 entry=$2 dest=$3 work=$4 archive lists
  archive=$({
    grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{ print $2 }'
    grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list | awk '{ print $2 }'
  } | grep -v security | head -1)
  if [[ -z $archive ]]; then
    echo "no Debian archive in the machine's apt sources, to fetch $entry ($suite) from" >&2
    return 1
  fi
  lists="$work/apt-$suite"
  local -a apt=(-o "Dir::Etc::sourcelist=$lists/sources.list" -o Dir::Etc::sourceparts=-
    -o "Dir::State::Lists=$lists/lists" -o "Dir::Cache=$lists/cache")
  if [[ ! -f $lists/.updated ]]; then
    mkdir -p "$lists/lists/partial" "$lists/cache/archives/partial"
    echo "deb $archive $suite main" >"$lists/sources.list"
    apt-get "${apt[@]}" update -qq || {
      echo "could not read the package list of Debian $suite (for $entry in scripts/deps/qemu.txt)" >&2
      return 1
    }
    touch "$lists/.updated"
  fi
  rm -rf "$work/deb" && mkdir -p "$work/deb" "$dest"
  if ! (cd "$work/deb" && apt-get "${apt[@]}" download -qq "$entry" 2>/dev/null); then
    echo "could not download $entry of Debian $suite (recorded in scripts/deps/qemu.txt); if the" \
      "archive no longer has that version, record one it has" >&2
    return 1
  fi
  _qemu_peer_extract "$work/deb" "$dest"
}

# Fetches Debian package `name=version` with apt-get download into $3 and unpacks it into $2.
# apt-get update runs (as root) only when the download fails: the package lists may be missing
# or older than the recorded version.
_qemu_peer_unpack() {
  local entry=$1 dir=$2 work=$3 pkg=${1%%=*}
  rm -rf "$work/deb" && mkdir -p "$work/deb"
  if ! (cd "$work/deb" && apt-get download -qq "$entry" 2>/dev/null); then
    if [[ $(id -u) -eq 0 ]]; then
      log "apt-get download $entry failed: updating the package lists and trying again"
      apt-get update -qq || return 1
    else
      echo "apt-get download $entry failed; if the package lists are missing or old, run" \
        "'sudo apt-get update' and try again" >&2
    fi
    if ! (cd "$work/deb" && apt-get download -qq "$entry"); then
      echo "could not download $entry (recorded in scripts/deps/qemu.txt); if the archive no longer" \
        "has that version, record one it has (apt-cache policy $pkg)" >&2
      return 1
    fi
  fi
  _qemu_peer_extract "$work/deb" "$dir"
}

# Unpacks every .deb of $1 into $2.
_qemu_peer_extract() {
  local deb
  for deb in "$1"/*.deb; do
    dpkg-deb -x "$deb" "$2" || return 1
  done
}
