#!/usr/bin/env bash
# Provide a CPython >= 3.12 on Debian 12 (whose python3 is 3.11) using only Debian's package
# archive (the mirror this host's apt is configured with): the tests that load exported tasks with the `harbor` package need one (harbor requires
# Python >= 3.12). Debian 13 (trixie) ships python3.13, but its binaries need trixie's libc, so the
# interpreter is built from trixie's python3.13 *source* package (fetched with apt-get source
# through a private apt configuration: the system's sources and package state are not touched),
# then installed into its own prefix. Build dependencies are bookworm's -dev packages.
#
# Idempotent: a working interpreter in the prefix is reused. Prints the interpreter path as its
# last line (progress goes to stderr). Run as root (it installs build dependencies with apt-get).
#   SWE_RESIDUAL_PYTHON312_PREFIX   install prefix (default /opt/swe-residual/python3.13)
set -euo pipefail

prefix="${SWE_RESIDUAL_PYTHON312_PREFIX:-/opt/swe-residual/python3.13}"
py="$prefix/bin/python3.13"
log() { echo "python312.sh: $*" >&2; }

works() {
  [ -x "$py" ] && "$py" -c 'import sys, ssl, sqlite3, zlib, bz2, lzma, ctypes, venv, ensurepip; assert sys.version_info >= (3, 12)' 2>/dev/null
}

if works; then
  echo "$py"
  exit 0
fi

export DEBIAN_FRONTEND=noninteractive
deps=(build-essential dpkg-dev xz-utils pkg-config libssl-dev zlib1g-dev libffi-dev libsqlite3-dev libbz2-dev
      liblzma-dev uuid-dev libreadline-dev libncurses-dev libgdbm-dev libexpat1-dev)
need=()
for pkg in "${deps[@]}"; do dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg"); done
if ((${#need[@]})); then
  log "installing build dependencies: ${need[*]}"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# the Debian mirror this host's apt uses (as swe-residual images bootstrap does)
repo="$(cd "$(dirname "$0")/.." && pwd)"
mirror="$(PYTHONPATH="$repo" /usr/bin/python3 -c 'from swe_residual.backends.docker.bootstrap import host_apt_mirrors; print(host_apt_mirrors()[0])')"
work="$(mktemp -d /tmp/swe-residual-python312.XXXXXX)"
trap 'rm -rf "$work"' EXIT
# a private apt configuration that knows only trixie's source index
mkdir -p "$work/apt/lists/partial" "$work/apt/cache/archives/partial" "$work/apt/etc/sources.list.d" \
         "$work/apt/etc/preferences.d" "$work/src"
cat > "$work/apt/etc/sources.list.d/trixie-src.sources" <<EOF
Types: deb-src
URIs: $mirror
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
: > "$work/apt/etc/sources.list"
aptopts=(-o "Dir::Etc::SourceList=$work/apt/etc/sources.list" -o "Dir::Etc::SourceParts=$work/apt/etc/sources.list.d"
         -o "Dir::Etc::Preferences=$work/apt/etc/preferences" -o "Dir::Etc::PreferencesParts=$work/apt/etc/preferences.d"
         -o "Dir::State::Lists=$work/apt/lists" -o "Dir::Cache=$work/apt/cache" -o "APT::Sandbox::User=root")
log "fetching trixie's python3.13 source index"
apt-get "${aptopts[@]}" -qq update >&2
log "downloading the python3.13 source package"
(cd "$work/src" && apt-get "${aptopts[@]}" -qq source --download-only python3.13 >&2)
orig="$(ls "$work"/src/python3.13_*.orig.tar.* | head -n 1)"
[ -f "$orig" ] || { log "no python3.13 orig tarball downloaded"; exit 1; }
log "building $(basename "$orig") into $prefix (takes a few minutes)"
mkdir -p "$work/build"
tar -xf "$orig" -C "$work/build" --strip-components=1
cd "$work/build"
./configure --prefix="$prefix" --with-ensurepip=install --enable-shared LDFLAGS="-Wl,-rpath,$prefix/lib" >"$work/configure.log" 2>&1 \
  || { tail -n 30 "$work/configure.log" >&2; exit 1; }
make -j"$(nproc)" >"$work/make.log" 2>&1 || { tail -n 40 "$work/make.log" >&2; exit 1; }
make install >"$work/install.log" 2>&1 || { tail -n 40 "$work/install.log" >&2; exit 1; }
works || { log "built interpreter $py does not work (missing modules?)"; exit 1; }
echo "$py"
