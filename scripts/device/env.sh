# Sourced by the scripts beside it, on the device machine, with ROOT (the
# copied tree), B (its build-gpu), S (B/bin/slicesched) and T (a second
# binary to check) set: links /work/main to the tree where the binaries'
# baked paths need it, and puts the device's LibTorch, CUDA and NCCL (and
# build-gpu/rtlibs for the rest) on LD_LIBRARY_PATH.
# Baked absolute paths (configs/accelerators, ...) point into /work/main.
# Link it to this tree only where it does not exist (never clobber one).
WORK_LINK=${WORK_LINK:-/work/main}
if [ ! -e "$WORK_LINK" ] && [ ! -L "$WORK_LINK" ]; then
  if mkdir -p "$(dirname "$WORK_LINK")" 2>/dev/null && ln -sfn "$ROOT" "$WORK_LINK"; then echo "linked $WORK_LINK -> $ROOT"
  else echo "WARNING: could not create $WORK_LINK -> $ROOT; baked paths will not resolve"; fi
elif [ "$(readlink -f "$WORK_LINK")" = "$ROOT" ]; then echo "$WORK_LINK is this tree"
else echo "note: $WORK_LINK exists ($(readlink -f "$WORK_LINK")), left as is; baked paths resolve there"; fi
# plugin libraries (not needed by the built-in policies; kept where the build put them)
[ -e "$ROOT/build-gpu/plugins" ] || ln -sfn rtlibs/plugins "$ROOT/build-gpu/plugins"

# LibTorch, CUDA runtime and NCCL from the device's torch wheel.
TORCH_PY=${TORCH_PY:-/opt/torch/.venv/bin/python3}
[ -x "$TORCH_PY" ] || TORCH_PY=$(command -v python3 || true)
if [ -z "${TORCH_DIR:-}" ]; then
  TORCH_DIR=$("$TORCH_PY" -c 'import importlib.util as u; print(u.find_spec("torch").submodule_search_locations[0])' 2>/dev/null)
fi
TORCH_LIB=$TORCH_DIR/lib
NV=$(cd "$TORCH_DIR/.." 2>/dev/null && pwd -P)/nvidia
echo "torch: $TORCH_DIR ($(grep -m1 '^__version__' "$TORCH_DIR/version.py" 2>/dev/null)) via $TORCH_PY"
[ -f "$TORCH_LIB/libtorch_cuda.so" ] || echo "WARNING: $TORCH_LIB/libtorch_cuda.so missing"
LP=$B/rtlibs:$TORCH_LIB
for d in "$NV"/*/lib; do [ -d "$d" ] && LP=$LP:$d; done
export LD_LIBRARY_PATH=$LP${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# The bundled libstdc++/libgcc_s (Debian 12, GCC 12) only where the system's
# cannot load the binaries (a newer system libstdc++ is kept).
if "$S" --help 2>&1 >/dev/null | grep -Eq "libstdc\+\+|libgcc_s|GLIBCXX|CXXABI"; then
  export LD_LIBRARY_PATH=$B/rtlibs/stdcxx:$LD_LIBRARY_PATH
  echo "using bundled libstdc++/libgcc_s"
fi
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
echo "glibc: $(ldd --version 2>&1 | head -1)"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
missing=$(ldd "$S" "$T" 2>&1 | grep -E "not found" | sort -u)
[ -n "$missing" ] && echo "MISSING LIBRARIES:" && echo "$missing"
