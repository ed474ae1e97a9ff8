#!/usr/bin/env bash
# Installs the system packages the test suite needs, when they are missing.
set -euo pipefail
need=()
command -v tshark >/dev/null 2>&1 || need+=(tshark)
command -v ping >/dev/null 2>&1 || need+=(iputils-ping)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v nsenter >/dev/null 2>&1 || need+=(util-linux)
command -v iptables >/dev/null 2>&1 || need+=(iptables)
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v wg >/dev/null 2>&1 || need+=(wireguard-tools)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "deps: missing ${need[*]}; install with: sudo apt-get install -y ${need[*]}" >&2
  exit 1
fi
echo "deps: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections 2>/dev/null || true
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
