#!/usr/bin/env bash
# Builds the lab tool flux-kubeconfig and Flux's kustomize-controller and
# helm-controller from the modules pinned in go.mod here, source-controller from
# ../source (a module of its own: see the replaces in its go.mod),
# notification-controller from ../notification (its own module: its dependencies
# resolve apart from the others'), and copies their CRDs out of the same modules.
# Everything comes through the Go module proxy, checked against go.sum; nothing
# else is fetched.
#   usage: build.sh OUT_DIR
#   writes OUT_DIR/flux-kubeconfig,
#          OUT_DIR/bin/{source,kustomize,helm,notification}-controller,
#          OUT_DIR/crds/{kustomizations,helmreleases,gitrepositories,
#          ocirepositories,buckets,helmrepositories,helmcharts,externalartifacts,
#          alerts,providers,receivers}.yaml
set -euo pipefail

if [ "$#" -ne 1 ] || [ -z "$1" ]; then
    echo "usage: $0 OUT_DIR" >&2
    exit 2
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$1/crds"
out=$(cd "$1" && pwd)
cd "$here"

# go.sum must already hold every hash: never edit go.mod/go.sum here. No VCS
# stamp: the binary depends on the sources only.
export GOFLAGS="-mod=readonly -buildvcs=false"

go build -trimpath -o "$out/flux-kubeconfig" .
mkdir -p "$out/bin"
go build -trimpath -ldflags "-s -w" -o "$out/bin/" \
    github.com/fluxcd/kustomize-controller github.com/fluxcd/helm-controller
(cd ../source && go build -trimpath -ldflags "-s -w" -o "$out/bin/" github.com/fluxcd/source-controller)
(cd ../notification && go build -trimpath -ldflags "-s -w" -o "$out/bin/" github.com/fluxcd/notification-controller)

# stored_version FILE VERSION: the CRD's spec.versions has VERSION with
# storage: true (version items are "  - " entries, their keys indented 4).
stored_version() {
    awk -v want="$2" '
        /^  versions:/ { inv = 1; next }
        inv && /^  [^ -]/ { inv = 0 }
        inv && /^  - / { cur = "" }
        inv && match($0, /^(  - |    )name: /) { cur = substr($0, RLENGTH + 1) }
        inv && /^    storage: true$/ && cur == want { ok = 1 }
        END { exit !ok }' "$1"
}

# copy_crd MODULE FILE DEST GROUP VERSION: FILE from the module's
# config/crd/bases, checked to define GROUP with VERSION as the stored version.
copy_crd() {
    local module=$1 file=$2 dest=$3 group=$4 version=$5 dir src
    go mod download "$module"
    dir=$(go list -m -f '{{.Dir}}' "$module")
    src="$dir/config/crd/bases/$file"
    if [ -z "$dir" ] || [ ! -f "$src" ]; then
        echo "build.sh: $file not found in $module (go list -m gave '$dir')" >&2
        exit 1
    fi
    if ! grep -q "^  group: $group\$" "$src" || ! stored_version "$src" "$version"; then
        echo "build.sh: $src does not define $group/$version as the stored version; check the pinned version in go.mod" >&2
        exit 1
    fi
    # The module cache is read-only; give the copy ordinary permissions.
    install -m 0644 "$src" "$out/crds/$dest"
}

copy_crd github.com/fluxcd/kustomize-controller \
    kustomize.toolkit.fluxcd.io_kustomizations.yaml kustomizations.yaml \
    kustomize.toolkit.fluxcd.io v1
copy_crd github.com/fluxcd/helm-controller \
    helm.toolkit.fluxcd.io_helmreleases.yaml helmreleases.yaml \
    helm.toolkit.fluxcd.io v2

# source-controller's: kustomize-controller watches every source kind (and
# ExternalArtifact) at start, helm-controller the HelmChart it makes.
cd ../source
for kind in gitrepositories ocirepositories buckets helmrepositories helmcharts externalartifacts; do
    copy_crd github.com/fluxcd/source-controller \
        "source.toolkit.fluxcd.io_$kind.yaml" "$kind.yaml" \
        source.toolkit.fluxcd.io v1
done

# notification-controller's: Alerts and Providers, and the Receivers it also
# watches at start.
cd ../notification
copy_crd github.com/fluxcd/notification-controller \
    notification.toolkit.fluxcd.io_alerts.yaml alerts.yaml \
    notification.toolkit.fluxcd.io v1beta3
copy_crd github.com/fluxcd/notification-controller \
    notification.toolkit.fluxcd.io_providers.yaml providers.yaml \
    notification.toolkit.fluxcd.io v1beta3
copy_crd github.com/fluxcd/notification-controller \
    notification.toolkit.fluxcd.io_receivers.yaml receivers.yaml \
    notification.toolkit.fluxcd.io v1
