#!/usr/bin/env bash
# Installs every Debian package Strata needs to build, test and benchmark. Idempotent and quiet:
# packages already present are skipped, and apt runs only when something is missing.
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build pkg-config clang-format git
  # build speed: a compiler cache kept outside the tree, and a fast linker (cmake/BuildSpeed.cmake)
  ccache mold
  # control plane
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  # storage engine
  liburing-dev librocksdb-dev libucx-dev ucx-utils libxxhash-dev libssl-dev libzstd-dev
  # codecs: xkv's eigendecomposition
  libeigen3-dev
  # common libraries
  libabsl-dev libspdlog-dev libfmt-dev libcli11-dev libtomlplusplus-dev
  prometheus-cpp-dev libzmq3-dev libmsgpack-dev pybind11-dev python3-dev
  # tests and benchmarks
  googletest libgtest-dev libgmock-dev libbenchmark-dev prometheus fio gnuplot-nox python3-cbor2 python3-msgpack openssl
  python3-yaml
  # fuzzing (make test-fuzz): clang with libFuzzer
  clang libclang-rt-14-dev
  iproute2
  redis-server
  # the controller's leader election (tests start a real etcd)
  etcd-server
  # the engines environments' virtual environments (scripts/engines-env.sh, make test-engines)
  python3-venv
)

missing=()
for pkg in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${#missing[@]} package(s): ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
