# Sourced by tools/install-deps.sh and tools/install-test-deps.sh:
#   apt_missing PKG...   prints those of PKG not installed, one per line.
apt_missing() {
  local p
  for p in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
      echo "$p"
    fi
  done
}
