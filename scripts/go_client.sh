#!/usr/bin/env bash
# The Go client in clients/go: Go, the two protoc plugins and the Go libraries all come from
# Debian's packages, because the Go module proxy and GitHub cannot be reached from CI. The
# libraries live under /usr/share/gocode and are used in GOPATH mode (GO111MODULE=off), so
# the client has no go.mod and nothing is ever downloaded by `go`.
#
# Usage: scripts/go_client.sh install    apt-get install the toolchain, only if something is missing
#        scripts/go_client.sh generate   regenerate clients/go/gen from the protos
#        scripts/go_client.sh check      fail on drift in clients/go/gen, then build and vet
#        scripts/go_client.sh build OUT  build cmd/partialquery into OUT
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
client=$root/clients/go
# The import path every go_package in protos/ starts with.
module=github.com/reachstore/reachstore
# Debian's GOPATH tree of packaged Go libraries.
gocode=/usr/share/gocode

# golang-github-golang-protobuf-1-5-dev is named on purpose: the libraries accept either it or
# the 1.3 branch, and apt would pick 1.3, whose github.com/golang/protobuf predates the
# google.golang.org/protobuf runtime that protoc-gen-go 1.28's output is written for. grpc
# marshals through github.com/golang/protobuf, so the two must be the same runtime.
packages=(
  golang-go
  protoc-gen-go
  protoc-gen-go-grpc
  golang-google-protobuf-dev
  golang-github-golang-protobuf-1-5-dev
  golang-google-grpc-dev
  golang-google-genproto-dev
)
# Whether any of the packages is not installed. Asking dpkg rather than looking for `go` and
# the plugins on PATH also catches a missing library, and the 1.3 protobuf branch standing
# where the 1.5 one should be (the two conflict, so installing 1.5 replaces it).
missing() {
  local pkg
  for pkg in "${packages[@]}"; do
    [ "$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null)" = "install ok installed" ] || return 0
  done
  return 1
}

cmd_install() {
  if ! missing; then
    echo "Go toolchain and libraries already installed"
    return
  fi
  local sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  local apt=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq --no-install-recommends "${packages[@]}")
  # A fresh image often ships without package lists; refresh them only when the install
  # says so, since `apt-get update` is the slow part and usually not needed.
  if ! "${apt[@]}" >/dev/null; then
    echo "apt-get install failed; refreshing the package lists and trying again" >&2
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    "${apt[@]}" >/dev/null
  fi
  go version
}

require_tools() {
  if missing; then
    echo "Go or its Debian libraries are missing: run 'make go-install' first" >&2
    exit 1
  fi
}

# Writes the generated code into OUT/gen/go (buf.gen.yaml's `out`, relative to -o).
generate_into() {
  local out=$1
  # Start from nothing, so a deleted proto leaves no stale package behind.
  rm -rf "$out/gen"
  mkdir -p "$out"
  # buf from the project's venv; the plugins are Debian's, found on PATH. --path keeps the
  # vendored google/api protos out: their Go code comes from golang-google-genproto-dev.
  (cd "$root" && PATH="$root/.venv/bin:$PATH" buf generate . \
    --template "$client/buf.gen.yaml" --path protos/reachstore -o "$out")
}

cmd_generate() {
  require_tools
  generate_into "$client"
  echo "generated $(find "$client/gen" -name '*.go' | wc -l) Go files into clients/go/gen"
}

# Relative patterns from inside the link: `go` does not follow a symlink when expanding
# github.com/reachstore/reachstore/..., but still names these packages by that path.
PKGS=(./gen/go/... ./cmd/...)

# in_gopath TMP CMD...: runs CMD in GOPATH mode, which wants the code at src/<import path>:
# a throwaway GOPATH under TMP whose github.com/reachstore/reachstore is a link to
# clients/go, followed by Debian's tree for every dependency. GOFLAGS is cleared so a
# developer's -mod=mod cannot get in the way, and the build cache is private so nothing is
# left behind.
in_gopath() {
  local tmp=$1
  shift
  if [ ! -e "$tmp/gopath/src/$module" ]; then
    mkdir -p "$tmp/gopath/src/$(dirname "$module")"
    ln -s "$client" "$tmp/gopath/src/$module"
  fi
  (
    cd "$tmp/gopath/src/$module"
    export GOPATH="$tmp/gopath:$gocode" GO111MODULE=off GOCACHE="$tmp/cache" GOFLAGS=
    "$@"
  )
}

# Builds cmd/partialquery into OUT (the tests run it against a real system).
cmd_build() {
  require_tools
  local out
  out=$(realpath -m "$1")
  local tmp
  tmp=$(mktemp -d)
  # shellcheck disable=SC2064  # expand now: $tmp is local to this function
  trap "rm -rf '$tmp'" EXIT
  in_gopath "$tmp" go build -o "$out" ./cmd/partialquery
}

cmd_check() {
  require_tools
  local tmp
  tmp=$(mktemp -d)
  # shellcheck disable=SC2064  # expand now: $tmp is local to this function
  trap "rm -rf '$tmp'" EXIT

  generate_into "$tmp/out"
  if diff -r "$client/gen" "$tmp/out/gen" >"$tmp/drift.txt"; then
    echo "generated Go code matches the protos"
  else
    echo "Go drift (run 'make go-generate'):"
    sed 's/^/  /' "$tmp/drift.txt" | head -50
    exit 1
  fi

  in_gopath "$tmp" go build "${PKGS[@]}"
  in_gopath "$tmp" go vet "${PKGS[@]}"
  echo "Go client builds and vets: $(cd "$client" && find gen/go -name '*.pb.go' | wc -l) generated files, cmd/partialquery"
}

case ${1:-} in
  install) cmd_install ;;
  generate) cmd_generate ;;
  check) cmd_check ;;
  build) cmd_build "${2:?usage: $0 build OUT}" ;;
  *)
    echo "usage: $0 install|generate|check|build OUT" >&2
    exit 2
    ;;
esac
