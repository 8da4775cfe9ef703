#!/usr/bin/env bash
# The loop's share before and after a change, on one machine: this tree's benchmarks/loop_share.py
# run on each given work tree's dllm_edit, the trees interleaved, at 2 and 8 layers.
#
#   git worktree add /tmp/w/before a9f080e && git worktree add /tmp/w/after HEAD --detach
#   benchmarks/loop_share_trees.sh /tmp/w/before /tmp/w/after        # log: runs/loop_share-<date>.log
set -euo pipefail
if [ "$#" -lt 1 ]; then
    echo "usage: $0 TREE [TREE ...]  (git work trees whose dllm_edit to time)" >&2
    exit 2
fi
here="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-$here/.venv/bin/python}"
mkdir -p "$here/runs"
log="$here/runs/loop_share-$(date -u +%Y%m%d-%H%M).log"
{ lscpu | grep 'Model name' || true; } >> "$log"
for layers in ${LAYERS:-2 8}; do
    for tree in "$@"; do
        tree="$(cd "$tree" && pwd)"
        echo "== $tree ($(git -C "$tree" rev-parse --short HEAD)) layers $layers $(date -u +%T)" >> "$log"
        # run from the tree's folder so that its dllm_edit, not an installed one, is imported
        (cd "$tree" && PYTHONPATH="$tree" "$python" -c "import dllm_edit; print('dllm_edit from', dllm_edit.__file__)" \
            && PYTHONPATH="$tree" "$python" "$here/benchmarks/loop_share.py" --repeats 3 --new-tokens 64 \
                --layers "$layers") >> "$log" 2>&1
    done
done
echo "== done $(date -u +%T)" >> "$log"
echo "$log"
