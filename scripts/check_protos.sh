#!/usr/bin/env bash
# buf lint, buf breaking (FILE) against the previous commit, and a check that the committed
# generated code is exactly what the protos produce. Exits non-zero on any failure.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

echo "== buf lint"
buf lint

echo "== buf breaking against HEAD~1"
if git rev-parse --verify --quiet HEAD~1 >/dev/null && git cat-file -e HEAD~1:buf.yaml 2>/dev/null; then
  buf breaking --against ".git#ref=HEAD~1"
else
  echo "no previous commit with buf.yaml: nothing to compare against"
fi

echo "== generated code drift"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
scripts/generate_protos.sh "$tmp" "$tmp/descriptors.binpb"
committed=$(cd clients/python && find reachstore \( -name '*_pb2.py' -o -name '*_pb2.pyi' -o -name '*_pb2_grpc.py' \) | sort)
generated=$(cd "$tmp" && find reachstore \( -name '*_pb2.py' -o -name '*_pb2.pyi' -o -name '*_pb2_grpc.py' \) | sort)
if [ "$committed" != "$generated" ]; then
  echo "generated files differ from the committed ones:"
  diff <(echo "$committed") <(echo "$generated") || true
  exit 1
fi
status=0
while read -r f; do
  cmp -s "clients/python/$f" "$tmp/$f" || { echo "drift: $f (run 'make generate')"; status=1; }
done <<< "$committed"
cmp -s reachstore_server/bridge/descriptors.binpb "$tmp/descriptors.binpb" \
  || { echo "drift: reachstore_server/bridge/descriptors.binpb (run 'make generate')"; status=1; }
[ $status -eq 0 ] && echo "generated code matches the protos"
exit $status
