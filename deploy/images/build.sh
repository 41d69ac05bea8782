#!/usr/bin/env bash
# Builds Weft's images on a machine without a container registry.
#
#   deploy/images/build.sh [--profile release|debug] [--rebuild-base]
#
# 1. A base image, weft-base:<suite>, made from Debian packages: debootstrap
#    into a folder (python3, ca-certificates and bubblewrap, which confines
#    the workers' scripts, included), then
#    `docker import`. The mirror is the one this machine's apt already uses
#    (read from its apt configuration when the script runs). The base is
#    kept, and made again only with --rebuild-base.
# 2. weft:dev: the base with the coordinator, worker and weft binaries
#    built on this machine (target/<profile>; build them first) and
#    deploy/config in /etc/weft, run as the user weft (uid 10001).
# 3. weft-etcd:dev: the base with etcd and etcdctl from Debian's etcd-server
#    and etcd-client packages, run as the user etcd (uid 10002).
#
# Needs root (debootstrap), debootstrap, dpkg-deb and the docker engine. The
# binaries must be built on a Debian of the same suite as the base (the
# suite is this machine's), so that they find the same C library.
set -euo pipefail

repo="$(cd "$(dirname "$0")/../.." && pwd)"
profile=release
rebuild_base=0
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) profile="${2:?--profile needs release or debug}"; shift 2 ;;
    --rebuild-base) rebuild_base=1; shift ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case "$profile" in
  release|debug) ;;
  *) echo "build.sh: --profile is release or debug, not '$profile'" >&2; exit 2 ;;
esac

say() { printf '==> %s\n' "$*"; }
fail() { echo "build.sh: $*" >&2; exit 1; }
# Runs a command, showing what it printed only if it fails (docker's legacy
# builder warns on every build).
quiet() {
  local log
  log="$(mktemp)"
  "$@" >"$log" 2>&1 || { cat "$log" >&2; rm -f "$log"; fail "failed: $*"; }
  rm -f "$log"
}

bin_dir="${CARGO_TARGET_DIR:-$repo/target}/$profile"
for binary in coordinator worker weft; do
  [ -x "$bin_dir/$binary" ] || fail "$bin_dir/$binary is missing: build it first
  (cargo build $( [ "$profile" = release ] && echo '--release ')-p weft-coordinator -p weft-worker -p weft-client)"
done
command -v docker >/dev/null || fail "the docker command is missing"

suite="$(. /etc/os-release && echo "${VERSION_CODENAME:?no VERSION_CODENAME in /etc/os-release}")"
base="weft-base:$suite"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The first Debian archive this machine's apt reads `suite` from.
mirror() {
  apt-get indextargets --format '$(REPO_URI) $(RELEASE) $(TARGET_OF)' \
    | awk -v suite="$suite" '$2 == suite && $3 == "deb" { print $1; exit }'
}

# A base made before the workers confined their scripts lacks bubblewrap.
if [ "$rebuild_base" = 0 ] && docker image inspect "$base" >/dev/null 2>&1 \
    && ! docker run --rm --entrypoint /bin/sh "$base" -c 'test -x /usr/bin/bwrap' >/dev/null 2>&1; then
  say "base image $base lacks bubblewrap: making it again"
  rebuild_base=1
fi
if [ "$rebuild_base" = 1 ] || ! docker image inspect "$base" >/dev/null 2>&1; then
  command -v debootstrap >/dev/null || fail "debootstrap is missing (apt-get install debootstrap)"
  [ "$(id -u)" = 0 ] || fail "making the base image needs root (debootstrap)"
  url="$(mirror)"
  [ -n "$url" ] || fail "this machine's apt configuration names no archive for $suite"
  say "base image $base: debootstrap $suite from $url"
  debootstrap --variant=minbase --include=python3,ca-certificates,bubblewrap \
    "$suite" "$work/root" "$url" >"$work/debootstrap.log" 2>&1 \
    || { tail -20 "$work/debootstrap.log" >&2; fail "debootstrap failed"; }
  rm -rf "$work/root/var/cache/apt/archives/"*.deb "$work/root/var/lib/apt/lists/"*
  tar -C "$work/root" --numeric-owner -c . \
    | docker import --change 'CMD ["/bin/bash"]' - "$base" >/dev/null
  rm -rf "$work/root"
else
  say "base image $base: kept (--rebuild-base makes it again)"
fi

say "weft:dev from $bin_dir"
mkdir -p "$work/weft/bin"
cp "$bin_dir/coordinator" "$bin_dir/worker" "$bin_dir/weft" "$work/weft/bin/"
cp -r "$repo/deploy/config" "$work/weft/config"
quiet docker build -q --build-arg "BASE=$base" -t weft:dev \
  -f "$repo/deploy/images/weft.Dockerfile" "$work/weft"

say "weft-etcd:dev from Debian's etcd-server and etcd-client"
mkdir -p "$work/etcd/debs" "$work/etcd/bin"
(cd "$work/etcd/debs" && { apt-get download etcd-server etcd-client >/dev/null 2>&1 \
  || { apt-get update -qq && apt-get download etcd-server etcd-client >/dev/null; }; }) \
  || fail "cannot download etcd-server and etcd-client with apt-get"
for deb in "$work/etcd/debs/"*.deb; do
  dpkg-deb -x "$deb" "$work/etcd/root"
done
cp "$work/etcd/root/usr/bin/etcd" "$work/etcd/root/usr/bin/etcdctl" "$work/etcd/bin/"
rm -rf "$work/etcd/debs" "$work/etcd/root"
quiet docker build -q --build-arg "BASE=$base" -t weft-etcd:dev \
  -f "$repo/deploy/images/etcd.Dockerfile" "$work/etcd"

docker image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E '^(weft|weft-etcd|weft-base):' || true
