#!/usr/bin/env bash
# Collect the non-glibc, non-torch/nvidia shared libraries the build-gpu binaries need.
set -euo pipefail
B=/work/main/build-gpu
SP=/work/gpuvenv/lib/python3.11/site-packages
export LD_LIBRARY_PATH=$SP/torch/lib:$SP/nvidia/cu13/lib:$SP/nvidia/nccl/lib
rm -rf "$B/rtlibs"; mkdir -p "$B/rtlibs/stdcxx"
files=("$B"/bin/slicesched "$B"/bin/slicesched_cuda_tests "$B"/bin/slicesched_tests "$B"/lib/*.so "$B"/plugins/*.so)
ldd "${files[@]}" | awk '/=> \//{print $1, $3}' | sort -u | grep -v "$SP" \
  | grep -Ev "^(libc|libm|libdl|libpthread|librt|libutil|libresolv)\.so|ld-linux|linux-vdso" |
while read -r name path; do
  case "$name" in libstdc++.so.6|libgcc_s.so.1) dest=$B/rtlibs/stdcxx;; *) dest=$B/rtlibs;; esac
  cp -L "$path" "$dest/$name"
done
ldd "${files[@]}" | grep "not found" && exit 1
strip --strip-unneeded "$B"/rtlibs/*.so* "$B"/rtlibs/stdcxx/*.so* 2>/dev/null || true
ls -la "$B/rtlibs" "$B/rtlibs/stdcxx"; du -sh "$B/rtlibs"
