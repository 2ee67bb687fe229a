#!/usr/bin/env bash
# Sets up a CUDA 13.0 build toolchain from PyPI wheels, for machines with no CUDA toolkit and no GPU
# (the development and CI machines). It lets `cargo build --features cuda` compile candle's kernels
# and link the binary here; the binary then runs on a machine with an NVIDIA driver (580+ for CUDA 13.0).
#
#   eval "$(kernels/setup-toolchain.sh)"        # prints the exports; first run downloads ~650 MB
#   cargo build --release --features cuda
#
# Pinned to CUDA 13.0 because the GPU machine's driver (580) and its toolkit are 13.0: PTX from a newer
# nvcc would not load there. CUDA_COMPUTE_CAP defaults to 90 (H100/H200); Blackwell RTX PRO 6000 is 120.
# libcuda.so comes with the driver, not with a wheel: the script links against a generated stub that only
# carries the driver API's symbol names (taken from the cudarc crate in the cargo registry); the real
# libcuda.so.1 is loaded at run time.
set -euo pipefail
ROOT=${CUDA_TOOLCHAIN_DIR:-$HOME/.cache/cuda-toolchain-13.0}
CAP=${CUDA_COMPUTE_CAP:-90}
WHEELS="nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-cuda-runtime==13.0.96
        nvidia-cuda-cccl==13.0.85 nvidia-cuda-nvrtc==13.0.88 nvidia-cublas==13.0.2.14 nvidia-curand==10.4.0.35"
if [ ! -x "$ROOT/cuda/nvidia/cu13/bin/nvcc" ]; then
  mkdir -p "$ROOT/whl" "$ROOT/cuda" >&2
  python3 -m pip download --no-deps -q -d "$ROOT/whl" $WHEELS >&2
  for w in "$ROOT"/whl/*.whl; do unzip -q -o "$w" -d "$ROOT/cuda" >&2; done
fi
CU="$ROOT/cuda/nvidia/cu13"
LINK="$ROOT/link"
if [ ! -e "$LINK/libcuda.so" ]; then
  mkdir -p "$LINK"
  for l in cublas cublasLt cudart nvrtc; do ln -sf "$CU/lib/lib$l.so.13" "$LINK/lib$l.so"; done
  ln -sf "$CU/lib/libcurand.so.10" "$LINK/libcurand.so"
  # the driver API symbols, from cudarc's bindings (fetch the crates first: `cargo fetch`)
  SYS=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/cudarc-*/src/driver/sys/mod.rs 2>/dev/null | sort -V | tail -1)
  if [ -z "$SYS" ]; then echo "setup-toolchain: run 'cargo fetch' in the project first (cudarc sources are needed for the libcuda stub)" >&2; exit 1; fi
  grep -oE '^ *pub unsafe fn cu[A-Za-z0-9_]+' "$SYS" | sed 's/.*fn //' | sort -u \
    | awk 'BEGIN{print "/* link-time stub: symbol names only; the driver provides libcuda.so.1 */"} {print "void " $1 "(void) {}"}' > "$LINK/cudastub.c"
  cc -shared -o "$LINK/libcuda.so" -Wl,-soname,libcuda.so.1 "$LINK/cudastub.c"
fi
echo "export PATH=\"$CU/bin:\$PATH\""
echo "export LIBRARY_PATH=\"$LINK\${LIBRARY_PATH:+:\$LIBRARY_PATH}\""
echo "export CUDA_COMPUTE_CAP=$CAP"
