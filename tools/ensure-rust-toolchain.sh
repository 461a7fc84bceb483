#!/usr/bin/env bash
# Makes the Rust toolchain that rust-toolchain.toml pins available before any
# cargo call (`make` runs this first).
#
# A machine whose rustup has only `stable` cannot install the pinned release
# when it cannot reach the Rust download servers, and cargo then refuses to
# start in this directory. If `stable` *is* the pinned release, the pinned
# name is made to point at it: rustup's own `toolchain link` refuses names
# that look like a release ("invalid custom toolchain name"), so the entry is
# made as a symbolic link in rustup's toolchains directory, which is what an
# install of that release would have put there. Any other mismatch is left
# alone, with one line saying what is wrong; cargo's own error follows.
set -euo pipefail
cd "$(dirname "$0")/.."

want=$(sed -n 's/^channel *= *"\([^"]*\)".*/\1/p' rust-toolchain.toml)
[ -n "$want" ] || { echo "note: rust-toolchain.toml names no channel"; exit 0; }

if ! command -v rustup >/dev/null 2>&1; then
    # No rustup: the pin is not enforced; cargo is whatever is on PATH.
    have=$(rustc --version 2>/dev/null | awk '{print $2}') || true
    [ "$have" = "$want" ] || echo "note: rust-toolchain.toml pins Rust $want but rustc on PATH is ${have:-missing} (no rustup to switch)"
    exit 0
fi

# Installed under its full name (e.g. 1.95.0-x86_64-unknown-linux-gnu)?
if rustup toolchain list | awk '{print $1}' | grep -q -x -e "$want" -e "$want-.*"; then
    exit 0
fi

stable=$(rustup run stable rustc --version 2>/dev/null | awk '{print $2}') || true
if [ "$stable" != "$want" ]; then
    echo "note: rust-toolchain.toml pins Rust $want, which rustup does not have, and its stable is ${stable:-not installed}: run \`rustup toolchain install $want\`"
    exit 0
fi
host=$(rustup run stable rustc -vV | sed -n 's/^host: //p')
sysroot=$(rustup run stable rustc --print sysroot)
link="$(rustup show home)/toolchains/$want-$host"
ln -sfn "$sysroot" "$link"
echo "note: Rust $want (rust-toolchain.toml) is this machine's stable: linked $link -> $sysroot"
