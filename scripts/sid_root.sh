#!/usr/bin/env bash
# CPython 3.14 and 3.15 from Debian unstable, in a chroot (their libc is newer than the
# host's): made once with mmdebstrap and kept in $MEMTAPE_SID_ROOT (default
# ~/.cache/memtape/sid-root), see ../shared/research/python314.md.
#
#   scripts/sid_root.sh ensure          make the root when it is missing (as root; ~40 s)
#   scripts/sid_root.sh run CMD...      run CMD inside it, in this checkout, as this user
#
# `run` bind-mounts this checkout (and ../shared beside it), the Rust toolchain
# (~/.cargo, ~/.rustup), pyenv's interpreters, ~/.cache/memtape, /dev, /dev/pts, /dev/shm
# and /proc, in a mount namespace of its own where the kernel allows one (then the mounts
# end with the run, however it ends), and unmounts all of them when CMD ends, fails or is
# interrupted, so no run leaves mounts behind. CMD's exit status is the script's.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
root="${MEMTAPE_SID_ROOT:-$HOME/.cache/memtape/sid-root}"
# Bump when the package list changes: an older root is made again.
recipe=4
packages=(
  python3.14 python3.14-dev python3.14-venv libpython3.14-testsuite
  python3.15 python3.15-dev python3.15-venv libpython3.15-testsuite
  gcc g++ libc6-dev ca-certificates gdb chromium nodejs npm procps tmux git
)

die() {
  echo "scripts/sid_root.sh: $*" >&2
  exit 3
}

ensure() {
  if [ -f "$root/.memtape-recipe" ] && [ "$(cat "$root/.memtape-recipe")" = "$recipe" ]; then
    return 0
  fi
  [ "$(id -u)" = 0 ] || die "making the CPython 3.14/3.15 root needs root (mmdebstrap, chroot)"
  command -v mmdebstrap >/dev/null 2>&1 || {
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >/dev/null
  } || die "could not install mmdebstrap"
  # The mirror is the host's own (a dated snapshot: its Release file has expired).
  local mirror
  mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null ||
    true)
  mirror="${mirror:-http://deb.debian.org/debian}"
  local tmp="$root.new.$$"
  rm -rf "$tmp"
  mkdir -p "$(dirname "$root")"
  echo "making the CPython 3.14/3.15 root in $root (Debian unstable from $mirror)" >&2
  local list
  list=$(
    IFS=,
    echo "${packages[*]}"
  )
  if ! mmdebstrap --quiet --variant=minbase --aptopt='Acquire::Check-Valid-Until "false"' \
    --include="$list" sid "$tmp" \
    "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror sid main"; then
    rm -rf "$tmp"
    die "mmdebstrap failed"
  fi
  echo "$recipe" >"$tmp/.memtape-recipe"
  rm -rf "$root"
  mv "$tmp" "$root"
}

mounted=()
unmount_all() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    umount "${mounted[$i]}" 2>/dev/null || umount -l "${mounted[$i]}" 2>/dev/null || true
  done
  mounted=()
}

bind() {
  # bind SOURCE: mounts SOURCE at the same path inside the root.
  local src="$1" dst="$root$1"
  mkdir -p "$dst"
  if mountpoint -q "$dst"; then
    return 0 # another run of this script holds it; it unmounts it
  fi
  mount --bind "$src" "$dst"
  mounted+=("$dst")
}

run() {
  ensure
  [ "$(id -u)" = 0 ] || die "running in the CPython 3.14/3.15 root needs root (chroot)"
  trap unmount_all EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  # The registries are reached through a proxy whose CA only the host's bundle has.
  cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
  cp -L /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
  mkdir -p "$root/proc"
  if ! mountpoint -q "$root/proc"; then
    mount -t proc proc "$root/proc"
    mounted+=("$root/proc")
  fi
  bind /dev
  bind /dev/pts
  [ -d /dev/shm ] && bind /dev/shm
  bind "$here"
  [ -d "$here/../shared" ] && bind "$(cd "$here/../shared" && pwd)"
  mkdir -p "$HOME/.cache/memtape"
  bind "$HOME/.cache/memtape"
  # The Rust toolchain runs inside unchanged; pyenv's interpreters (the tests start an
  # older one to see it refused) too.
  local pyenv_root="${PYENV_ROOT:-$HOME/.pyenv}"
  for d in "${CARGO_HOME:-$HOME/.cargo}" "${RUSTUP_HOME:-$HOME/.rustup}" "$pyenv_root"; do
    [ -d "$d" ] && bind "$d"
  done
  # The package clients' settings (certificates, mirrors) are the host's.
  for f in /etc/pip.conf "$HOME/.npmrc" "$HOME/.config/pip/pip.conf"; do
    [ -f "$f" ] && mkdir -p "$root$(dirname "$f")" && cp "$f" "$root$f"
  done
  local cargo_bin="${CARGO_HOME:-$HOME/.cargo}/bin"
  local status=0
  # The host's environment, less what points at the host's interpreters; a target
  # folder of its own (build scripts linked against unstable's newer C library would
  # not run on the host).
  chroot "$root" /usr/bin/env -u VIRTUAL_ENV -u PYENV_VERSION -u PYTHONHOME -u PYTHONPATH \
    -u LD_LIBRARY_PATH -u PYO3_PYTHON -u PYENV_ROOT LANG=C.UTF-8 \
    PATH="$cargo_bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin" \
    CARGO_HOME="${CARGO_HOME:-$HOME/.cargo}" RUSTUP_HOME="${RUSTUP_HOME:-$HOME/.rustup}" \
    CARGO_TARGET_DIR="$here/target/sid-root" MEMTAPE_IN_SID_ROOT=1 \
    /bin/bash -c 'cd "$0" && exec "$@"' "$here" "$@" || status=$?
  unmount_all
  return "$status"
}

case "${1:-}" in
ensure) ensure ;;
run)
  shift
  [ $# -gt 0 ] || die "run needs a command"
  # In a mount namespace of its own (where the kernel lets root make one) the mounts go
  # with the run's last process, even when it is killed outright (SIGKILL, a lost
  # session), which no trap sees. Without one, the traps above unmount.
  if [ -z "${MEMTAPE_SID_NS:-}" ] && [ "$(id -u)" = 0 ] &&
    unshare --mount --propagation private true 2>/dev/null; then
    MEMTAPE_SID_NS=1 exec unshare --mount --propagation private bash "$0" run "$@"
  fi
  run "$@"
  ;;
*) die "usage: scripts/sid_root.sh ensure | run CMD..." ;;
esac
