#!/usr/bin/env bash
# Writes the seed corpora (git-ignored): kubeconfigs shaped like k3s, RKE2 and kubeadm
# write them, a few hostile variants, and the PEM inside them, all with fresh
# throwaway certificates from the openssl CLI. Run from anywhere: fuzz/seed.sh
# Then, from fuzz/ (RUSTC_BOOTSTRAP=1 and no +nightly when only stable is installed):
#   cargo +nightly fuzz run -O kubeconfig corpus/kubeconfig -- -dict=kubeconfig.dict -max_total_time=600
#   cargo +nightly fuzz run -O pem corpus/pem -- -max_total_time=300
set -euo pipefail
cd "$(dirname "$0")"
kc=corpus/kubeconfig pem=corpus/pem
mkdir -p "$kc" "$pem"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

b64() { base64 -w0 "$@"; }
# KEYALG is ec (P-256) or rsa (2048 bits)
newkey() { if [ "$1" = ec ]; then echo "-newkey ec -pkeyopt ec_paramgen_curve:P-256"; else echo "-newkey rsa"; fi; }
# ca NAME CN KEYALG
ca() {
  # shellcheck disable=SC2046
  openssl req -x509 $(newkey "$3") -nodes -keyout "$tmp/$1.key" -out "$tmp/$1.crt" \
    -subj "/CN=$2" -days 3650 -addext basicConstraints=critical,CA:TRUE 2>/dev/null
}
# leaf NAME SUBJECT KEYALG ISSUER: the key is written in its traditional encoding
leaf() {
  # shellcheck disable=SC2046
  openssl req -new $(newkey "$3") -nodes -keyout "$tmp/$1.p8" -subj "$2" 2>/dev/null |
    openssl x509 -req -CA "$tmp/$4.crt" -CAkey "$tmp/$4.key" -days 365 -out "$tmp/$1.crt" 2>/dev/null
  openssl pkey -in "$tmp/$1.p8" -traditional -out "$tmp/$1.key"
}
# kubeconfig FILE CLUSTER USER CONTEXT SERVER CA CERTFILE KEYFILE
kubeconfig() {
  cat > "$1" <<YAML
apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: $(b64 "$tmp/$6.crt")
    server: $5
  name: $2
contexts:
- context:
    cluster: $2
    user: $3
  name: $4
current-context: $4
kind: Config
preferences: {}
users:
- name: $3
  user:
    client-certificate-data: $(b64 "$7")
    client-key-data: $(b64 "$8")
YAML
}

for distro in k3s rke2; do
  ca "$distro-server" "$distro-server-ca@1700000000" ec
  ca "$distro-client" "$distro-client-ca@1700000000" ec
  leaf "$distro-admin" "/O=system:masters/CN=system:admin" ec "$distro-client"
  cat "$tmp/$distro-admin.crt" "$tmp/$distro-client.crt" > "$tmp/$distro-chain.crt"
  kubeconfig "$kc/$distro.yaml" default default default https://127.0.0.1:6443 \
    "$distro-server" "$tmp/$distro-chain.crt" "$tmp/$distro-admin.key"
done
ca kubernetes kubernetes rsa
leaf kubeadm-admin "/O=kubeadm:cluster-admins/CN=kubernetes-admin" rsa kubernetes
kubeconfig "$kc/kubeadm.yaml" kubernetes kubernetes-admin kubernetes-admin@kubernetes \
  https://10.0.0.10:6443 kubernetes "$tmp/kubeadm-admin.crt" "$tmp/kubeadm-admin.key"

# Hostile variants, so the fuzzer starts next to the refusals.
sed 's/^  user:$/  user:\n    exec: {command: sh, args: [-c, id]}/' "$kc/k3s.yaml" > "$kc/k3s-exec.yaml"
sed 's/^- cluster:$/- cluster:\n    insecure-skip-tls-verify: true/' "$kc/rke2.yaml" > "$kc/rke2-insecure.yaml"
sed 's/^current-context: .*/current-context: gone/' "$kc/kubeadm.yaml" > "$kc/kubeadm-no-context.yaml"
printf 'a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\n' > "$kc/aliases.yaml"
# Templates: the fuzz target replaces @CA@, @CHAIN@, @CERT@ and @KEY@ with valid data,
# so mutations of the YAML around them still reach sanitize, rewrite and output.
cat > "$kc/k3s-template.yaml" <<'YAML'
apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: @CA@
    server: https://127.0.0.1:6443
  name: default
contexts:
- context:
    cluster: default
    user: default
  name: default
current-context: default
kind: Config
preferences: {}
users:
- name: default
  user:
    client-certificate-data: @CHAIN@
    client-key-data: @KEY@
YAML
printf 'users: [{name: u, user: {client-key-data: @KEY@, client-certificate-data: @CERT@, token: t}}]\ncurrent-context: c\nclusters: [{name: k, cluster: {server: "https://[::1]:6443/p", tls-server-name: x.y, certificate-authority-data: @CA@}}]\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n' > "$kc/flow-template.yaml"

cp "$tmp/k3s-chain.crt" "$pem/k3s-chain.pem"
cp "$tmp/k3s-admin.key" "$pem/sec1.key"
cp "$tmp/kubeadm-admin.key" "$pem/pkcs1.key"
cp "$tmp/kubeadm-admin.p8" "$pem/pkcs8.key"
openssl genpkey -algorithm ED25519 -out "$pem/ed25519.key"
echo "seeded: $(ls "$kc" | wc -l) kubeconfigs in $kc, $(ls "$pem" | wc -l) PEM files in $pem"
