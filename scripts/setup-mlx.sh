#!/usr/bin/env bash
# Unpacks MLX for the MLX executor (`--features mlx`, issue 20) once, into
#   ${VAUBAN_CACHE:-$HOME/.cache/vauban}/mlx/<version>/
# and prints the variables a build needs on its last lines (`eval` them).
#
# What it gathers, none of it installed system-wide (apt-get download
# fetches a .deb without installing it; as root the package lists may be
# refreshed first):
# - MLX itself from the PyPI wheel `mlx-cpu` (a Linux CPU build: libmlx.so,
#   its C++ headers and MLXConfig.cmake; glibc 2.35 or newer);
# - Debian's OpenBLAS (bookworm's package, by name, version and sha256,
#   through apt-get download) in place of
#   the wheel's reference BLAS and LAPACK:
#   the wheel bundles netlib's, which multiplies a 2048² f32 matrix at
#   3.6 GFLOP/s here against OpenBLAS's 141-166. libmlx.so finds its BLAS
#   through its rpath, so the two files are replaced in the unpacked copy
#   (LD_LIBRARY_PATH alone does not override them);
# - libclang from the PyPI wheel `libclang`, for mlx-sys's bindgen;
# - cmake from PyPI (shared with scripts/build-llama-server.sh).
# mlx-sys (vendored and patched in third_party/mlx-sys) then builds only
# mlx-c against this MLX, once: the static library is kept beside it
# (MLX_SYS_MLXC_CACHE) for later clean builds.
set -euo pipefail

version="0.32.4"
libclang_version="18.1.1"
openblas_version="0.3.21+ds-4"
openblas_sha256="4f7e4561dbfa9286c671c91350204fbda7afad675500e59cd4a56f84604844f8"
cmake_version="3.31.6"

cache="${VAUBAN_CACHE:-$HOME/.cache/vauban}"
prefix="$cache/mlx/$version"
tools="$cache/tools/cmake-$cmake_version"

# mlx-c as built by mlx-sys (a static library) is kept by what it is built
# from: its sources as patched, the build script, MLX's version, the compiler.
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mlxc_key="$( (cd "$repo/third_party/mlx-sys" && find src/mlx-c build.rs -type f -print0 | sort -z | xargs -0 sha256sum; gcc -dumpfullversion) | sha256sum | cut -c1-12)"

print_env() {
  echo "export MLX_SYS_MLX_DIR=$prefix/mlx"
  echo "export MLX_SYS_MLXC_CACHE=$prefix/mlx-c-$mlxc_key"
  echo "export LIBCLANG_PATH=$prefix/libclang"
  # The wheel's libclang has no resource headers (float.h, stddef.h): gcc's.
  echo "export BINDGEN_EXTRA_CLANG_ARGS=\"-I$(gcc -print-file-name=include)\""
  echo "export CMAKE=$tools/bin/cmake"
  echo "export LD_LIBRARY_PATH=$prefix/mlx/lib:$prefix/mlx_cpu.libs\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
}

if [ ! -x "$tools/bin/cmake" ]; then
  rm -rf "$tools"
  python3 -m venv "$tools"
  "$tools/bin/pip" install --quiet "cmake==$cmake_version"
fi

if [ -f "$prefix/done" ]; then
  echo "setup-mlx: cached in $prefix" >&2
  print_env
  exit 0
fi

case "$(uname -m)" in
  x86_64) ;;
  *)
    echo "setup-mlx: only x86_64 Linux is scripted; on macOS build with the metal feature (docs/executor.md)" >&2
    exit 1
    ;;
esac

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "setup-mlx: downloading mlx-cpu $version and libclang $libclang_version" >&2
python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$work" \
  --python-version 3.11 --platform manylinux_2_35_x86_64 \
  "mlx-cpu==$version"
python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$work" \
  --python-version 3.11 --platform manylinux2010_x86_64 \
  "libclang==$libclang_version"
echo "setup-mlx: downloading Debian's OpenBLAS $openblas_version" >&2
# apt-get download fetches a package by name and version from the
# machine's configured sources into the current folder, as any user; a
# machine whose package lists do not hold that version yet has them
# refreshed first (as root; otherwise the error says what to run).
openblas_pkg="libopenblas0-pthread=$openblas_version"
if ! command -v apt-get >/dev/null; then
  echo "setup-mlx: OpenBLAS comes from Debian bookworm's $openblas_pkg through apt-get, and this machine has no apt-get" >&2
  exit 1
fi
if ! apt-cache show "$openblas_pkg" >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq >&2
  else
    echo "setup-mlx: $openblas_pkg is not in the package lists; run \`sudo apt-get update\`, then this script again" >&2
    exit 1
  fi
  if ! apt-cache show "$openblas_pkg" >/dev/null 2>&1; then
    echo "setup-mlx: this machine's package sources do not carry $openblas_pkg (Debian bookworm's); the script is written for Debian bookworm" >&2
    exit 1
  fi
fi
# apt fetches as its own user (_apt), so that user may write the folder.
chmod 755 "$work"
mkdir -m 777 "$work/apt"
(cd "$work/apt" && apt-get download -qq "$openblas_pkg" >&2)
mv "$work"/apt/libopenblas0-pthread_*.deb "$work/openblas.deb"
echo "$openblas_sha256  $work/openblas.deb" | sha256sum --check --quiet

rm -rf "$prefix"
mkdir -p "$prefix/libclang"
python3 - "$work" "$prefix" <<'EOF'
import pathlib, sys, zipfile
work, prefix = map(pathlib.Path, sys.argv[1:])
for wheel in sorted(work.glob("*.whl")):
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            name = info.filename
            if name.endswith("/"):
                continue
            if name.startswith(("mlx/lib/", "mlx/include/", "mlx/share/", "mlx_cpu.libs/")):
                target = prefix / name
            elif name.endswith("/clang/native/libclang.so"):
                target = prefix / "libclang" / "libclang.so"
            else:
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(z.read(info))
            mode = info.external_attr >> 16
            if mode:
                target.chmod(mode & 0o777)
EOF
# The wheel's BLAS and LAPACK, replaced by OpenBLAS under the names
# libmlx.so asks for. OpenBLAS asks for libgfortran.so.5: the wheel's own
# gfortran (renamed by auditwheel) answers to that name too.
dpkg-deb -x "$work/openblas.deb" "$work/deb"
blas_dir="$work/deb/usr/lib/x86_64-linux-gnu/openblas-pthread"
libs="$prefix/mlx_cpu.libs"
cp "$blas_dir/libblas.so.3" "$(ls "$libs"/libblas-*.so.*)"
cp "$blas_dir/liblapack.so.3" "$(ls "$libs"/liblapack-*.so.*)"
cp -L "$blas_dir/libopenblas.so.0" "$libs/"
ln -sf "$(basename "$(ls "$libs"/libgfortran-*.so.*)")" "$libs/libgfortran.so.5"
for f in mlx/lib/libmlx.so mlx/share/cmake/MLX/MLXConfig.cmake libclang/libclang.so; do
  [ -f "$prefix/$f" ] || { echo "setup-mlx: $f is missing from the wheels" >&2; exit 1; }
done
date -u +%FT%TZ > "$prefix/done"
echo "setup-mlx: MLX $version in $prefix" >&2
print_env
