#!/bin/sh
# Installs the official SDKs that internal/e2e's TestOfficialSDKs points at
# a gateway (package-lock.json pins them) into DIR/node_modules. Needs node
# (18 or later), npm and the npm registry. Running it again skips an
# install that is up to date.
set -eu

[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
src=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$1"
dir=$(cd "$1" && pwd)

for tool in node npm; do
	command -v "$tool" >/dev/null || { echo "install.sh: $tool not found" >&2; exit 1; }
done
node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 18 ? 0 : 1)' ||
	{ echo "install.sh: node $(node --version) is too old: 18 or later is needed" >&2; exit 1; }

if cmp -s "$src/package-lock.json" "$dir/package-lock.json" && [ -d "$dir/node_modules" ]; then
	echo "sdks: up to date"
	exit 0
fi
cp "$src/package.json" "$src/package-lock.json" "$dir/"
(cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
echo "sdks: installed in $dir"
