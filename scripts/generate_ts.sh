#!/usr/bin/env bash
# Regenerates the TypeScript code for every reachstore proto into clients/typescript/src/gen,
# with buf and the local protoc-gen-es from clients/typescript/node_modules (`make ts-install`).
# Usage: scripts/generate_ts.sh [OUT_DIR]   (default: clients/typescript; code lands in OUT_DIR/src/gen)
# scripts/check_ts.sh generates into a temporary folder and compares.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ts=$root/clients/typescript
out=${1:-$ts}
mkdir -p "$out"
out=$(cd "$out" && pwd)
# buf and python from the project's venv, the plugin from the client's own node_modules.
export PATH="$ts/node_modules/.bin:$root/.venv/bin:$PATH"
if ! command -v protoc-gen-es >/dev/null; then
  echo "protoc-gen-es is not installed: run 'make ts-install' first" >&2
  exit 1
fi

# Start from nothing, so a deleted proto leaves no stale module behind. buf's own `clean`
# option cannot be used: the two runs below write into the same folder.
rm -rf "$out/src/gen"

# 1. Our protos and the google.api annotations they import (the buf.yaml workspace).
(cd "$root" && buf generate . --template "$ts/buf.gen.yaml" -o "$out")

# 2. google.rpc.ErrorInfo, RetryInfo, BadRequest and QuotaFailure: the standard details of
# every whole-request error. The proto comes from googleapis-common-protos, pinned in
# pyproject.toml, so both clients decode the details the servers were built with.
rpc_dir=$(python -c 'import os; from google.rpc import error_details_pb2 as m; print(os.path.dirname(m.__file__))')
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/google/rpc"
cp "$rpc_dir/error_details.proto" "$stage/google/rpc/"
(cd "$stage" && buf generate . --template "$ts/buf.gen.yaml" -o "$out")
