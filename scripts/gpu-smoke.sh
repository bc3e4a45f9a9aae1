#!/usr/bin/env bash
# GPU smoke test for a CI GPU runner: the official `vllm` package (0.33) and a
# real model.  Starts `vllm serve MODEL --guided-decoding-backend poot`, runs
# the e2e suite against it (POOT_E2E_URL), stops the server.
#   MODEL=/models/Qwen2.5-0.5B-Instruct scripts/gpu-smoke.sh [pytest args]
set -euo pipefail
: "${MODEL:?set MODEL to a local model path}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/_setup.sh"
PORT="${PORT:-8765}"
LOG="$ROOT/.e2e-logs/gpu-smoke-server.log"
mkdir -p "$ROOT/.e2e-logs"
"$VENV/bin/vllm" serve "$MODEL" --guided-decoding-backend poot --host 127.0.0.1 --port "$PORT" \
  --max-model-len 4096 >"$LOG" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true; wait $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
  curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
  kill -0 $SERVER 2>/dev/null || { tail -50 "$LOG"; exit 1; }
  sleep 1
done
POOT_E2E_URL="http://127.0.0.1:$PORT" "$PY" -m pytest -q -p no:cacheprovider tests/e2e "$@"
