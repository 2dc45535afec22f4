#!/usr/bin/env bash
# Build the interop tools: the Go host (real go-plugin client, configured the
# way Nomad's plugin loader configures it), a small Go device plugin, the agent's
# config path (agentcfg), Go's own functions for the SDK's ports (gostd) and the
# CDI spec reader (interop/cdi, a module of its own).
#
#   bash interop/build.sh
#
# Steps: install protoc-gen-go and protoc-gen-go-grpc (versions pinned by the
# `tool` lines of interop/go.mod) into interop/bin/; generate Go stubs from the
# project's own .proto files into interop/gen/ with the venv's grpc_tools.protoc;
# build interop/bin/gohost, goplugin, agentcfg and gostd. Everything written lands
# in interop/bin/ and interop/gen/, both git-ignored. Safe to re-run; a re-run
# with nothing changed takes a second or two (Go's build cache does the work).
#
# Environment: PYTHON (default: <repo>/.venv/bin/python) must have grpcio-tools.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
python="${PYTHON:-$root/.venv/bin/python}"
bin="$here/bin"
gen="$here/gen"

command -v go >/dev/null || {
  echo "build.sh: 'go' is not on PATH; install Go 1.24 or newer" >&2
  exit 1
}
mkdir -p "$bin"

# Two test sessions may build at once; let one finish before the other starts.
exec 9>"$bin/.build.lock"
flock 9

cd "$here"
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"

# 1. Code generators, at the versions go.mod pins.
GOBIN="$bin" go install tool

# 2. Go stubs. Only the Nomad-facing packages: go-plugin registers its own
#    plugin.* messages (Empty, StdioData, ConnInfo), and a second registration
#    of those names in one binary makes protobuf-go panic at start-up, so the
#    goplugin_*.proto files are deliberately left out.
include="$("$python" -c 'import grpc_tools, os; print(os.path.join(os.path.dirname(grpc_tools.__file__), "_proto"))')"
protos=(base device hclspec attribute stats)
files=()
for p in "${protos[@]}"; do
  files+=("nomad_device/proto/$p.proto")
done

staging="$(mktemp -d "$bin/.gen.XXXXXX")"
trap 'rm -rf "$staging"' EXIT
(
  cd "$root/src"
  "$python" -m grpc_tools.protoc \
    -I . -I "$include" \
    --plugin=protoc-gen-go="$bin/protoc-gen-go" \
    --plugin=protoc-gen-go-grpc="$bin/protoc-gen-go-grpc" \
    --go_out="$staging" --go_opt=module=interop \
    --go-grpc_out="$staging" --go-grpc_opt=module=interop \
    "${files[@]}"
)
# Replace gen/ only when the output changed, so file times stay put on re-runs.
if ! diff -r "$staging/gen" "$gen" >/dev/null 2>&1; then
  rm -rf "$gen"
  mv "$staging/gen" "$gen"
fi

# 3. The binaries.
go build -o "$bin/gohost" ./cmd/gohost
go build -o "$bin/goplugin" ./cmd/goplugin
go build -o "$bin/agentcfg" ./cmd/agentcfg
go build -o "$bin/gostd" ./cmd/gostd
# A module of its own: the CDI reference library and its dependencies stay out of
# the plugin tools' go.mod.
(cd cdi && go build -o "$bin/cdicheck" .)
echo "built $bin/gohost, $bin/goplugin, $bin/agentcfg, $bin/gostd and $bin/cdicheck" >&2
