#!/bin/sh
# Refreshes the vendored xterm.js (npm @xterm/xterm) that the web console
# embeds: lib/xterm.js, css/xterm.css and its LICENSE, at the version below.
# Needs npm and the npm registry; building and running obmd needs neither.
# Usage: sh bastion/webdoor/static/refresh.sh [version]
set -eu
version=${1:-6.0.0}
dir=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "@xterm/xterm@$version" >/dev/null)
tar -xzf "$tmp"/xterm-xterm-"$version".tgz -C "$tmp"
cp "$tmp/package/lib/xterm.js" "$dir/xterm.js"
cp "$tmp/package/css/xterm.css" "$dir/xterm.css"
cp "$tmp/package/LICENSE" "$dir/xterm.LICENSE"
echo "$version" > "$dir/xterm.VERSION"
echo "xterm.js $version vendored into $dir"
