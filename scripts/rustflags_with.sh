#!/usr/bin/env bash
# Prints, for CARGO_ENCODED_RUSTFLAGS, the flags cargo would take from this environment
# with each argument appended as one more flag. Usage: scripts/rustflags_with.sh FLAG...
#
# RUSTFLAGS is split on white space, so a flag naming a path with a space in it (a
# checkout under "My Projects", its target/ and profile files) falls apart there; in
# CARGO_ENCODED_RUSTFLAGS flags are separated by the 0x1f byte and keep their spaces.
# The caller's own flags come first, read as cargo reads them: CARGO_ENCODED_RUSTFLAGS
# when it is set (even empty: cargo then ignores RUSTFLAGS), else RUSTFLAGS.
set -euo pipefail
sep=$'\x1f'
flags=()
if [ -n "${CARGO_ENCODED_RUSTFLAGS+set}" ]; then
  IFS="$sep" read -r -d '' -a flags < <(printf '%s\0' "$CARGO_ENCODED_RUSTFLAGS") || true
elif [ -n "${RUSTFLAGS:-}" ]; then
  read -r -d '' -a flags < <(printf '%s\0' "$RUSTFLAGS") || true
fi
flags+=("$@")
(
  IFS="$sep"
  printf '%s' "${flags[*]}"
)
