#!/usr/bin/env bash
# Unpacks libtorch for the Torch executor (`--features torch`, issue 19)
# from PyPI wheels, once, into
#   ${VAUBAN_CACHE:-$HOME/.cache/vauban}/torch/<version>/
# and prints the variables a build needs on its last lines (`eval` them).
#
# The Linux `torch` wheel is the CUDA build; its CPU library
# (libtorch_cpu.so) needs only the CUDA runtime and CUPTI at run time, so
# those two come from their own wheels (the versions the torch wheel's
# `cuda-toolkit==13.0.3` pins) and not the 2 GB of cuBLAS and cuDNN. The
# wheel's libraries find them through their rpath
# (`$ORIGIN/../../nvidia/cu13/lib`), so they are unpacked side by side.
# No Python install is made: the wheels are zip files.
set -euo pipefail

version="2.13.0"
cuda_runtime="13.0.96"
cuda_cupti="13.0.85"

cache="${VAUBAN_CACHE:-$HOME/.cache/vauban}"
prefix="$cache/torch/$version"

print_env() {
  echo "export LIBTORCH=$prefix/torch"
  echo "export LIBTORCH_CXX11_ABI=1"
  echo "export LD_LIBRARY_PATH=$prefix/torch/lib:$prefix/nvidia/cu13/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
}

if [ -f "$prefix/done" ]; then
  echo "setup-torch: cached in $prefix" >&2
  print_env
  exit 0
fi

case "$(uname -m)" in
  x86_64) ;;
  *)
    echo "setup-torch: only x86_64 Linux is scripted; on another machine point LIBTORCH at a libtorch $version" >&2
    exit 1
    ;;
esac

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "setup-torch: downloading torch $version (about 530 MB) and the CUDA runtime wheels" >&2
python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$work" \
  --python-version 3.11 --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_25_x86_64 --platform manylinux_2_17_x86_64 \
  "torch==$version" \
  "nvidia-cuda-runtime==$cuda_runtime" \
  "nvidia-cuda-cupti==$cuda_cupti"

rm -rf "$prefix"
mkdir -p "$prefix"
# The C++ library, headers and CMake files; not the Python package.
python3 - "$work" "$prefix" <<'EOF'
import pathlib, sys, zipfile
work, prefix = map(pathlib.Path, sys.argv[1:])
wanted = ("torch/lib/", "torch/include/", "torch/share/", "torch/version.py", "nvidia/cu13/lib/")
for wheel in sorted(work.glob("*.whl")):
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            if info.filename.startswith(wanted):
                z.extract(info, prefix)
                mode = info.external_attr >> 16
                if mode:
                    (prefix / info.filename).chmod(mode & 0o777)
EOF
for lib in torch/lib/libtorch_cpu.so nvidia/cu13/lib/libcudart.so.13 nvidia/cu13/lib/libcupti.so.13; do
  [ -f "$prefix/$lib" ] || { echo "setup-torch: $lib is missing from the wheels" >&2; exit 1; }
done
# What libtorch's own archives carry: torch-sys checks it against the
# version its tch release expects, so a mismatch fails the build by name.
echo "$version" > "$prefix/torch/build-version"
date -u +%FT%TZ > "$prefix/done"
echo "setup-torch: libtorch $version in $prefix" >&2
print_env
