#!/usr/bin/env bash
# Regenerates the Python code for every reachstore proto into clients/python/, and the
# descriptor set with source info (the proto comments) the bridge reads for its OpenAPI
# document into reachstore_server/bridge/descriptors.binpb.
# Usage: scripts/generate_protos.sh [OUT_DIR [DESCRIPTOR_SET]]
#   (defaults: clients/python, reachstore_server/bridge/descriptors.binpb)
# The drift check (scripts/check_protos.sh) generates into a temporary folder and compares.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/clients/python}
descriptor_set=${2:-$root/reachstore_server/bridge/descriptors.binpb}
cd "$root"
grpc_include=$(python -c 'import grpc_tools, os; print(os.path.join(os.path.dirname(grpc_tools.__file__), "_proto"))')
mapfile -t files < <(cd protos && find reachstore -name '*.proto' | sort)
mkdir -p "$out"
# Remove what an earlier run generated, so a deleted proto leaves no stale module behind.
find "$out/reachstore" \( -name '*_pb2.py' -o -name '*_pb2.pyi' -o -name '*_pb2_grpc.py' \) -delete 2>/dev/null || true
(cd protos && python -m grpc_tools.protoc \
  -I . -I "$root/third_party/googleapis" -I "$grpc_include" \
  --python_out="$out" --pyi_out="$out" --grpc_python_out="$out" \
  "${files[@]}")
# Our files only (no google/api, no google/protobuf), comments kept: buf writes the same bytes
# for the same protos, so the drift check can compare them.
buf build --path protos/reachstore --exclude-imports --as-file-descriptor-set -o "$descriptor_set"
