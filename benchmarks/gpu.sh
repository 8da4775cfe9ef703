#!/usr/bin/env bash
# The GPU benchmarks, in one run (<= 10 minutes on one CUDA GPU: each step has its own time limit):
#   1. kernels: Triton `candidates` / `masked_logprob` GB/s against the card's device-to-device copy,
#      bf16 and fp32, V=157184, and their correctness against the torch references (OK / MISMATCH);
#   2. LLaDA-8B at its real shapes (the published config.json under tests/models/data/hub/, random
#      bf16 weights): dllm_edit's native class with the dual cache against Fast-dLLM's
#      generate_with_dual_cache rule, tokens/s at equal tokens, and whether tokens and forwards agree;
#   3. LLaDA2.0-mini at its real shapes: the S and Q presets through the block-causal prefix cache;
#   4. decoding on a ~125M-parameter block-causal Llama, bf16, batch 8: S vs Q, the preallocated
#      cache vs none vs transformers' StaticCache (adapter block_causal_static), torch.compile off vs on.
# Usage: benchmarks/gpu.sh [OUT_DIR]   (default: $OUT, else ./gpu-results). Results: OUT_DIR/*.md,
# the device in OUT_DIR/device.txt, each step's log next to its table; exit status 1 if a step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-${OUT:-gpu-results}}"
mkdir -p "$out"
python="${PYTHON:-python}"
echo "results -> $out"

"$python" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'CUDA is not available: this script needs a GPU')"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true; "$python" -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"; } > "$out/device.txt"
cat "$out/device.txt"

status=0
step() {  # step NAME TIMEOUT_S COMMAND...: run, tee the table to NAME.md, keep going on failure
    local name=$1 limit=$2
    shift 2
    echo "== $name (limit ${limit}s)"
    if ! timeout "$limit" "$@" > >(tee "$out/$name.md") 2> "$out/$name.log"; then
        echo "!! $name failed or timed out: see $out/$name.log" | tee -a "$out/$name.md"
        status=1
    fi
}

step kernels 110 "$python" benchmarks/kernel_speed.py --gpu-only
step llada_dual_cache 200 "$python" benchmarks/real_shapes.py --only llada --device cuda --dtype bfloat16 \
    --prompt 128 --gen 256 --block 32 --repeats 2
step llada2_modes 170 "$python" benchmarks/real_shapes.py --only llada2 --device cuda --dtype bfloat16 \
    --prompt 128 --gen 128 --block 32 --batch 4 --repeats 2
step decode 100 "$python" benchmarks/decode_speed.py --device-grid --device cuda --dtype bfloat16 \
    --hidden 768 --layers 8 --vocab 32000 --batch 8 --prompt-len 256 --new-tokens 256 --repeats 1
grep -h "MISMATCH" "$out/kernels.md" && status=1 || true
echo "done: $out (status $status)"
exit "$status"
