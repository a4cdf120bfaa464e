# Shared by scripts/demo.sh and scripts/test.sh (sourced): one build
# configuration, so running one after the other reuses the other's build
# instead of rebuilding the workspace.
#
#   CARGO_TARGET_DIR   default $HOME/.cache/vigil-target (kept outside the
#                      clone: builds stay warm across clones and runs)
#   CARGO_INCREMENTAL  default 0: incremental artifacts only help
#                      edit-compile loops, and in a kept target dir they grow
#                      by gigabytes per run (and a different value rebuilds
#                      every workspace crate)
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/vigil-target}"
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
