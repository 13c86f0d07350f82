#!/bin/sh
# install-deps.sh — install the Debian packages of tools/deps.list that are missing (make deps,
# make run, make check). As root: apt-get update + apt-get install. Otherwise: print the exact
# command and fail. Not a Debian system (no dpkg-query; e.g. a cluster with modules): say so and
# go on — the build itself then checks that CC and the libraries work (tools/check-deps.sh).
set -eu
here=$(dirname "$0")
if ! command -v dpkg-query >/dev/null 2>&1; then
    echo "dsgd-run: not a Debian system (no dpkg-query): no packages installed; the build checks CC and the libraries (docs/build.md)"
    exit 0
fi
missing=""
for p in $(grep -v '^#' "$here/deps.list"); do
    st=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
    [ "$st" = "installed" ] || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "dsgd-run: missing Debian packages:$missing"
if [ "$(id -u)" -ne 0 ]; then
    echo "dsgd-run: run as root:  apt-get update && apt-get install -y$missing"
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends $missing
