#!/usr/bin/env bash
# Installs what SliceScheduler needs on Debian 12, idempotently: quiet when
# everything is already there. LibTorch is the official one inside the
# pinned PyPI torch wheel (CPU and CUDA, with NCCL), in the project's own
# virtual environment .venv (cmake/LibTorch.cmake finds it there).
set -euo pipefail

APT_PACKAGES=(clang-19 clang-tools-19 libclang-rt-19-dev libboost-dev libboost-filesystem-dev libtomlplusplus-dev libtbb-dev
  libspdlog-dev libfmt-dev catch2 nlohmann-json3-dev libcli11-dev python3-pip python3-venv gnuplot-nox
  libsentencepiece-dev sentencepiece libpython3-dev libzmq3-dev cppzmq-dev pkg-config libcpp-httplib-dev libsqlite3-dev curl)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Named modules need CMake >= 3.28; Debian 12 ships 3.25, so CMake and Ninja
# come from PyPI.
if ! python3 -c 'import cmake, ninja, sys; v = tuple(int(x) for x in cmake.__version__.split(".")[:2]); sys.exit(v < (3, 28))' 2>/dev/null; then
  echo "setup: installing cmake and ninja from PyPI"
  python3 -m pip install -q --disable-pip-version-check 'cmake>=3.28' ninja 2>&1 | grep -v -i "warning: running pip as" || true
fi

# LibTorch 2: about 5 GB and two minutes the first time (the wheel and its
# CUDA, cuDNN and NCCL dependencies).
TORCH_VERSION=2.15.0
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
if ! "$ROOT/.venv/bin/python3" -c "import importlib.metadata as m, sys; sys.exit(m.version('torch') != '$TORCH_VERSION')" 2>/dev/null; then
  echo "setup: installing torch==$TORCH_VERSION (LibTorch with CUDA and NCCL, ~5 GB) into $ROOT/.venv"
  python3 -m venv "$ROOT/.venv"
  "$ROOT/.venv/bin/python3" -m pip install -q --disable-pip-version-check "torch==$TORCH_VERSION"
fi
# The HTTP front end's tests talk to it with the official `openai` client.
if ! "$ROOT/.venv/bin/python3" -c "import openai" 2>/dev/null; then
  echo "setup: installing the openai client into $ROOT/.venv (the HTTP tests use it)"
  "$ROOT/.venv/bin/python3" -m pip install -q --disable-pip-version-check openai
fi
# Hugging Face's `tokenizers` reads tokenizer.json (Llama 3, Qwen2.5) for
# slicesched itself, through its embedded Python (tokenizer/hf_tokenizer.cpp).
if ! "$ROOT/.venv/bin/python3" -c "import tokenizers" 2>/dev/null; then
  echo "setup: installing Hugging Face tokenizers into $ROOT/.venv (tokenizer.json support)"
  "$ROOT/.venv/bin/python3" -m pip install -q --disable-pip-version-check tokenizers
fi
# jinja2 renders models' chat templates for /v1/chat/completions (the
# library transformers uses), through the same embedded Python.
if ! "$ROOT/.venv/bin/python3" -c "import jinja2" 2>/dev/null; then
  echo "setup: installing jinja2 into $ROOT/.venv (chat templates)"
  "$ROOT/.venv/bin/python3" -m pip install -q --disable-pip-version-check jinja2
fi
# transformers: ctest hf_reference_tokens checks live mode's tokens against
# its Llama, Qwen2 and Phi (guidellm below brings it too).
if ! "$ROOT/.venv/bin/python3" -c "import transformers" 2>/dev/null; then
  echo "setup: installing Hugging Face transformers into $ROOT/.venv (the reference the live runtime is checked on)"
  "$ROOT/.venv/bin/python3" -m pip install -q --disable-pip-version-check transformers
fi
# guidellm (Neural Magic / vLLM project) benchmarks `serve --listen` as an
# outside client in ctest serve_guidellm; pinned, as its command line changes
# between releases.
GUIDELLM_VERSION=0.8.1
if ! "$ROOT/.venv/bin/python3" -c "import importlib.metadata as m, sys; sys.exit(m.version('guidellm') != '$GUIDELLM_VERSION')" 2>/dev/null; then
  echo "setup: installing guidellm==$GUIDELLM_VERSION into $ROOT/.venv (the serve_guidellm benchmark client)"
  "$ROOT/.venv/bin/python3" -m pip install -q --disable-pip-version-check "guidellm==$GUIDELLM_VERSION"
fi
