#!/usr/bin/env bash
# Builds the real Kubernetes control plane (etcd, kube-apiserver, kube-scheduler,
# kube-controller-manager: one binary, controlplane/main.go) from the pinned Go module in
# controlplane/, through the Go module proxy only, and caches it outside the clone under
# $XDG_CACHE_HOME/jupyterhub-gpu-reclaim/controlplane/<key>; the key covers the module's files,
# the Go version and the build flags, so a second run builds nothing. Prints the directory
# holding the binary and its four names (links) on stdout; progress goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/../controlplane"

say() { echo "build-controlplane: $*" >&2; }

if ! command -v go >/dev/null 2>&1; then
  say "no Go on PATH: install Go $(sed -n 's/^go //p' go.mod) or newer (https://go.dev/doc/install)"
  exit 1
fi
# the toolchain go.mod asks for; with GOTOOLCHAIN=local an older Go stops with a terse error,
# with GOTOOLCHAIN=auto it would fetch a newer toolchain unasked: either way say so first. Asked
# outside the module, go reports the Go it runs (the one GOTOOLCHAIN=goX names, if set)
need=$(sed -n 's/^go //p' go.mod)
have=$(cd / && go env GOVERSION | sed 's/^go//')
if [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1)" != "$need" ]; then
  say "Go $have is older than controlplane/go.mod needs ($need): install Go $need or newer," \
      "or run with GOTOOLCHAIN=go$need to have go fetch that toolchain through the module proxy"
  exit 1
fi

# nothing but the module proxy (no fall-back to the modules' own repositories) unless the
# caller chose a proxy; the binary links no C, as Kubernetes builds it
export GOPROXY="${GOPROXY:-https://proxy.golang.org}" CGO_ENABLED=0

# the version /version reports, read from go.mod without loading the modules (a cached build
# needs none of them); gitMajor/gitMinor feed the compatibility version
version=$(go mod edit -json | python3 -c 'import json, sys
print(next(r["Version"] for r in json.load(sys.stdin)["Require"] if r["Path"] == "k8s.io/kubernetes"))')
minor=${version#v1.}; minor=${minor%%.*}
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done
# -buildvcs=false: the binary does not depend on this repository's commit, only on the key's inputs
flags=(-trimpath -buildvcs=false -ldflags "$ldflags")

key=$( { cat go.mod go.sum ./*.go; go env GOVERSION GOOS GOARCH; echo "${flags[*]}"; } | sha256sum | cut -c1-16)
cache="${XDG_CACHE_HOME:-$HOME/.cache}/jupyterhub-gpu-reclaim/controlplane"
dir="$cache/$version-$key"
if [ -x "$dir/controlplane" ]; then
  say "up to date: $dir"
  echo "$dir"
  exit 0
fi

say "downloading the modules (go mod download)"
go mod download
say "building Kubernetes $version into $dir (from cold some 7 minutes on two idle cores and 3 GiB of memory: docs/benchmarks.md#building-the-control-plane-scriptsbuild-controlplanesh)"
mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
go build "${flags[@]}" -o "$tmp/controlplane" .
for name in etcd kube-apiserver kube-scheduler kube-controller-manager; do
  ln -s controlplane "$tmp/$name"
done
# a concurrent run may have finished first: its binary is the same
mv -T "$tmp" "$dir" 2>/dev/null || [ -x "$dir/controlplane" ]
echo "$dir"
