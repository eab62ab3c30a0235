#!/usr/bin/env bash
# The README's two commands for a fresh Debian/Ubuntu machine, run as a new
# user would: a clean clone of HEAD in a new Debian bookworm container
# (mmdebstrap + podman, as ../shared/containers.md describes), ../shared
# beside it, nothing of this machine's build inside.
#
#   ./tools/fresh-machine.sh            # both commands; log in target/fresh-machine/log
#   ./tools/fresh-machine.sh main       # only the first (build and process a clip)
#
# Two things come from the host, because this sandbox cannot reach them from
# a container: the Rust toolchain (sh.rustup.rs does not resolve here; mounted
# read-only, so install-deps.sh finds cargo) and the CA bundle that trusts the
# sandbox's TLS proxy (for crates.io and pip). On a real fresh machine
# install-deps.sh installs rustup itself.
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-both}
out=$PWD/target/fresh-machine
rm -rf "$out"
mkdir -p "$out"
image=localhost/base:bookworm
if ! podman image exists "$image"; then
  mmdebstrap --variant=minbase --include=ca-certificates bookworm "$out/rootfs.tar"
  podman import "$out/rootfs.tar" "$image"
  rm -f "$out/rootfs.tar"
fi
git clone -q "$PWD" "$out/work/main"
git -C "$out/work/main" log --oneline -1
shared=$(cd .. && pwd)/shared
main_cmd=$(sed -n '/^## Fresh Debian/,/^```$/p;' README.md | grep -m1 '^\./tools/install-deps.sh')
test_cmd=$(grep -m1 '^\./tools/install-deps.sh && \./tools/install-test-deps.sh' README.md)
case $what in
  main) script=$main_cmd ;;
  *) script="$main_cmd && $test_cmd" ;;
esac
echo "running in a fresh bookworm container: $script"
printf '[containers]\ndefault_ulimits = []\n' > "$out/containers.conf"
ca=/etc/ssl/certs/ca-certificates.crt
CONTAINERS_CONF=$out/containers.conf podman --runtime /usr/sbin/runc run --rm --network=host \
  -v "$out/work/main:/work/main" -v "$shared:/work/shared:ro" \
  -v "$HOME/.rustup:/opt/rustup:ro" -v "$HOME/.cargo/bin:/opt/cargo-bin:ro" -v "$ca:/opt/host-ca.crt:ro" \
  -e RUSTUP_HOME=/opt/rustup -e CARGO_HOME=/root/.cargo -e RUSTUP_AUTO_INSTALL=0 \
  -e PATH=/opt/cargo-bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  -e SSL_CERT_FILE=/opt/host-ca.crt -e CARGO_HTTP_CAINFO=/opt/host-ca.crt -e PIP_CERT=/opt/host-ca.crt \
  -e REQUESTS_CA_BUNDLE=/opt/host-ca.crt -e CURL_CA_BUNDLE=/opt/host-ca.crt \
  -w /work/main "$image" bash -c "set -o pipefail; mkdir -p out; ($script) 2>&1" | tee "$out/log"
echo "fresh-machine: ok ($what); log in $out/log"
