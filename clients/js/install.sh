#!/bin/sh
# Installs the JavaScript client's dependencies (package-lock.json pins
# them) into clients/js/node_modules and builds dist/ with tsc, where the
# Go tests (e2ee, internal/e2e) and the OpenAI SDK check find it.
# Needs node 20 or later, npm and the npm registry. Running it again skips
# an install that is up to date; the build always runs, so dist/ follows
# the sources.
set -eu

dir=$(cd "$(dirname "$0")" && pwd)

for tool in node npm; do
	command -v "$tool" >/dev/null || { echo "install.sh: $tool not found" >&2; exit 1; }
done
node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)' ||
	{ echo "install.sh: node $(node --version) is too old: 20 or later is needed" >&2; exit 1; }

cd "$dir"
stamp=node_modules/.svc-package-lock.json
if cmp -s package-lock.json "$stamp"; then
	echo "js: dependencies up to date"
else
	npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	cp package-lock.json "$stamp"
fi
npm run --silent build
echo "js: built in $dir/dist"
