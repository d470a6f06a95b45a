#!/usr/bin/env bash
# Fetches the internal UCX headers (src/uct/base, src/ucs/...) that the droce UCT transport's C
# shim compiles against. Debian's libucx-dev 1.13.1 installs only the public API headers; the
# component/iface/ep base classes live in the source package. Idempotent: a second run checks a
# stamp file and returns.
#
# Where: $DROCE_UCX_SRC, default /var/cache/droce/ucx-<version> (outside the tree; nothing from
# UCX is ever copied into the repo). ucx-glue/build.rs looks in the same place.
# Needs: a deb-src entry for bookworm (added here as /etc/apt/sources.list.d/droce-src.sources
# when none exists), dpkg-dev (dpkg-source), libucx-dev and ucx-utils (ucx_info -b => config.h).
set -euo pipefail

VER="$(dpkg-query -W -f='${Version}' libucx-dev 2>/dev/null || true)"
if [ -z "$VER" ]; then
  echo "setup-ucx-src: libucx-dev is not installed (apt-get install -y libucx-dev ucx-utils)" >&2
  exit 1
fi
UPSTREAM="${VER%%-*}"                       # 1.13.1-1 -> 1.13.1
DEST="${DROCE_UCX_SRC:-/var/cache/droce/ucx-$UPSTREAM}"
STAMP="$DEST/.droce-ready"

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$VER" ]; then
  exit 0
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

need=()
for p in dpkg-dev libucx-dev ucx-utils; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if ((${#need[@]})); then
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${need[@]}"
fi

if ! grep -rqsE '^(Types:.*deb-src|deb-src )' /etc/apt/sources.list /etc/apt/sources.list.d/; then
  echo "setup-ucx-src: adding a bookworm deb-src entry (/etc/apt/sources.list.d/droce-src.sources)" >&2
  $SUDO tee /etc/apt/sources.list.d/droce-src.sources >/dev/null <<'EOF'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  $SUDO apt-get update -q
fi

PARENT="$(dirname "$DEST")"
$SUDO mkdir -p "$PARENT"
[ -w "$PARENT" ] || $SUDO chown "$(id -u):$(id -g)" "$PARENT"
WORK="$(mktemp -d "$PARENT/.ucx-src.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
(cd "$WORK" && apt-get source -q --download-only "ucx=$VER" >/dev/null && dpkg-source -x --no-check ./ucx_*.dsc src >/dev/null)

# config.h: the build defines of the installed library, as `ucx_info -b` prints them.
ucx_info -b >"$WORK/src/config.h"
grep -q '^#define ENABLE_MT' "$WORK/src/config.h" || { echo "setup-ucx-src: ucx_info -b printed no build defines" >&2; exit 1; }

rm -rf "$DEST"
mv "$WORK/src" "$DEST"
echo "$VER" >"$STAMP"
echo "setup-ucx-src: UCX $VER sources in $DEST" >&2
