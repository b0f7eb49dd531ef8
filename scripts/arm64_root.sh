#!/usr/bin/env bash
# 64-bit ARM Linux on this x86-64 machine (see ../shared/research/aarch64.md): two Debian
# unstable roots, made once with mmdebstrap and kept under ~/.cache/memtape/
# ($MEMTAPE_ARM64_HOME):
#   arm64-root   an arm64 root (CPython 3.14 with its test suite, gcc), whose programs run
#                under qemu-user through the kernel's binfmt_misc, transparently
#   arm64-cross  an x86-64 root with the cross toolchain: Debian's rustc/cargo with the
#                arm64 standard library (libstd-rust-dev:arm64), gcc-aarch64-linux-gnu,
#                and Python for maturin
#
#   scripts/arm64_root.sh ensure        make what is missing (as root; qemu-user-static and
#                                       binfmt-support on the host too; ~8 min the first time)
#   scripts/arm64_root.sh cross CMD...  run CMD in the cross root, in this checkout, with
#                                       cargo set up for --target aarch64-unknown-linux-gnu
#                                       and PYO3_CROSS_LIB_DIR at the arm64 root's CPython
#   scripts/arm64_root.sh run CMD...    run CMD in the arm64 root (emulated), in this checkout
#
# Each run bind-mounts this checkout, ~/.cache/memtape (the roots, the cross build's own
# CARGO_HOME), /dev, /dev/pts, /dev/shm and /proc, in a mount namespace of its own where
# the kernel allows one (the mounts then end with the run, however it ends), and unmounts
# all of them when CMD ends, fails or is interrupted. CMD's exit status is the script's.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
home="${MEMTAPE_ARM64_HOME:-$HOME/.cache/memtape}"
arm64_root="$home/arm64-root"
cross_root="$home/arm64-cross"
# Bump when a package list changes: an older root is made again.
recipe=1
arm64_packages=(
  python3.14 python3.14-dev python3.14-venv libpython3.14-testsuite
  gcc libc6-dev ca-certificates procps
)
cross_packages=(
  rustc cargo libstd-rust-dev:arm64 gcc-aarch64-linux-gnu libc6-dev-arm64-cross
  python3 python3-venv ca-certificates
)

die() {
  echo "scripts/arm64_root.sh: $*" >&2
  exit 3
}

mirror() {
  # The host's own mirror (a dated snapshot: its Release file has expired).
  local m
  m=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  echo "${m:-http://deb.debian.org/debian}"
}

ensure_qemu() {
  # arm64 programs run through qemu-aarch64, registered with binfmt_misc with the F flag
  # (the interpreter is opened at registration, so the root needs no copy of it).
  if ! mountpoint -q /proc/sys/fs/binfmt_misc; then
    mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc ||
      die "could not mount binfmt_misc"
  fi
  if [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
    command -v qemu-aarch64-static >/dev/null 2>&1 || {
      apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user-static binfmt-support >/dev/null
    } || die "could not install qemu-user-static"
    update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || true
  fi
  [ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || die "qemu-aarch64 is not registered with binfmt_misc"
}

make_root() {
  # make_root DIR ARCHITECTURES PACKAGE...
  local dir="$1" arches="$2"
  shift 2
  if [ -f "$dir/.memtape-recipe" ] && [ "$(cat "$dir/.memtape-recipe")" = "$recipe" ]; then
    return 0
  fi
  local tmp="$dir.new.$$" list m
  m=$(mirror)
  list=$(
    IFS=,
    echo "$*"
  )
  rm -rf "$tmp"
  mkdir -p "$(dirname "$dir")"
  echo "making $dir ($arches, Debian unstable from $m)" >&2
  if ! mmdebstrap --quiet --variant=minbase --architectures="$arches" \
    --aptopt='Acquire::Check-Valid-Until "false"' --include="$list" sid "$tmp" \
    "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $m sid main"; then
    rm -rf "$tmp"
    die "mmdebstrap failed for $dir"
  fi
  echo "$recipe" >"$tmp/.memtape-recipe"
  rm -rf "$dir"
  mv "$tmp" "$dir"
}

ensure() {
  if [ -f "$arm64_root/.memtape-recipe" ] && [ "$(cat "$arm64_root/.memtape-recipe")" = "$recipe" ] &&
    [ -f "$cross_root/.memtape-recipe" ] && [ "$(cat "$cross_root/.memtape-recipe")" = "$recipe" ] &&
    [ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
    return 0
  fi
  [ "$(id -u)" = 0 ] || die "making the arm64 roots needs root (mmdebstrap, binfmt_misc, chroot)"
  command -v mmdebstrap >/dev/null 2>&1 || {
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >/dev/null
  } || die "could not install mmdebstrap"
  ensure_qemu
  make_root "$cross_root" amd64,arm64 "${cross_packages[@]}"
  make_root "$arm64_root" arm64 "${arm64_packages[@]}"
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
  # bind ROOT SOURCE: mounts SOURCE at the same path inside ROOT.
  local root="$1" src="$2" dst="$1$2"
  mkdir -p "$dst"
  if mountpoint -q "$dst"; then
    return 0 # another run of this script holds it; it unmounts it
  fi
  mount --bind "$src" "$dst"
  mounted+=("$dst")
}

enter() {
  # enter ROOT ENV... -- CMD...: chroot into ROOT, in this checkout, with ENV set.
  local root="$1"
  shift
  local env=()
  while [ "$1" != -- ]; do
    env+=("$1")
    shift
  done
  shift
  ensure
  [ "$(id -u)" = 0 ] || die "running in the arm64 roots needs root (chroot)"
  trap unmount_all EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  # The registries are reached through a proxy whose CA only the host's bundle has.
  cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
  cp -L /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
  for f in /etc/pip.conf "$HOME/.config/pip/pip.conf"; do
    [ -f "$f" ] && mkdir -p "$root$(dirname "$f")" && cp "$f" "$root$f"
  done
  mkdir -p "$root/proc"
  if ! mountpoint -q "$root/proc"; then
    mount -t proc proc "$root/proc"
    mounted+=("$root/proc")
  fi
  bind "$root" /dev
  bind "$root" /dev/pts
  [ -d /dev/shm ] && bind "$root" /dev/shm
  bind "$root" "$here"
  bind "$root" "$home"
  local status=0
  chroot "$root" /usr/bin/env -i HOME="$HOME" LANG=C.UTF-8 TERM="${TERM:-dumb}" \
    PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin "${env[@]}" \
    /bin/bash -c 'cd "$0" && exec "$@"' "$here" "$@" || status=$?
  unmount_all
  return "$status"
}

case "${1:-}" in
ensure) ensure ;;
cross | run)
  what="$1"
  shift
  [ $# -gt 0 ] || die "$what needs a command"
  # In a mount namespace of its own (where the kernel lets root make one) the mounts go
  # with the run's last process, even when it is killed outright, which no trap sees.
  if [ -z "${MEMTAPE_ARM64_NS:-}" ] && [ "$(id -u)" = 0 ] &&
    unshare --mount --propagation private true 2>/dev/null; then
    MEMTAPE_ARM64_NS=1 exec unshare --mount --propagation private bash "$0" "$what" "$@"
  fi
  if [ "$what" = cross ]; then
    ensure
    # A folder holding the arm64 libpython alone, for a build that links it (cargo build
    # of the binding crate without maturin's extension-module feature): the arm64 root's
    # library folder itself would also offer its C library to the cross linker.
    mkdir -p "$home/arm64-libpython"
    ln -sfn "$arm64_root/usr/lib/aarch64-linux-gnu/libpython3.14.so.1.0" \
      "$home/arm64-libpython/libpython3.14.so"
    # Cargo's own home (Debian's cargo is newer than the host's rustup one; they do not
    # share a registry cache), its own target folder, and the arm64 CPython's
    # sysconfigdata for PyO3 and maturin.
    enter "$cross_root" CARGO_HOME="$home/arm64-cargo" CARGO_TARGET_DIR="$here/target/arm64" \
      CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
      CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-L native=$home/arm64-libpython" \
      CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc \
      PYO3_CROSS_LIB_DIR="$arm64_root/usr/lib/python3.14" PYO3_CROSS_PYTHON_VERSION=3.14 \
      MEMTAPE_ARM64_ROOT="$arm64_root" -- "$@"
  else
    enter "$arm64_root" MEMTAPE_IN_ARM64_ROOT=1 -- "$@"
  fi
  ;;
*) die "usage: scripts/arm64_root.sh ensure | cross CMD... | run CMD..." ;;
esac
