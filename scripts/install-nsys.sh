#!/bin/sh
# Install Nsight Systems (`nsys`) from Debian's non-free archive, plus libnvToolsExt so a
# CPU-only program can emit NVTX ranges. Debian 12 (bookworm) ships nsys 2022.4.2.1
# (export schema 3.0.0). Needs root (or sudo). Safe to run twice.
set -eu

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

. /etc/os-release
if [ "${ID:-}" != "debian" ]; then
  echo "install-nsys.sh: Debian only (this is ${PRETTY_NAME:-unknown}); install Nsight Systems from developer.nvidia.com" >&2
  exit 1
fi

src=/etc/apt/sources.list.d/debian-nonfree.sources
if ! apt-cache policy nsight-systems 2>/dev/null | grep -q Candidate:.*[0-9]; then
  $SUDO sh -c "cat > $src" <<SRC
Types: deb
URIs: http://deb.debian.org/debian
Suites: ${VERSION_CODENAME} ${VERSION_CODENAME}-updates
Components: contrib non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  $SUDO apt-get update -q
fi
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends \
  nsight-systems libnvtoolsext1

# Debian splits the host and target trees: nsys looks for QdstrmImporter next to its target
# directory, and without this link `nsys profile` stops at a .qdstrm file.
multiarch=/usr/lib/x86_64-linux-gnu/nsight-systems
if [ -d "$multiarch/target-linux-x64" ] && [ ! -e "$multiarch/host-linux-x64" ]; then
  $SUDO ln -s /usr/lib/nsight-systems/host-linux-x64 "$multiarch/host-linux-x64"
fi
nsys --version
