#!/usr/bin/env bash
# Fails when the committed TypeScript code in clients/typescript/src/gen is not exactly what
# scripts/generate_ts.sh produces from the protos (run 'make ts-generate' to fix).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
scripts/generate_ts.sh "$tmp"
if diff -r "clients/typescript/src/gen" "$tmp/src/gen" >"$tmp/drift.txt"; then
  echo "generated TypeScript code matches the protos"
else
  echo "TypeScript drift (run 'make ts-generate'):"
  sed 's/^/  /' "$tmp/drift.txt" | head -50
  exit 1
fi
