#!/usr/bin/env bash
# The GPU benchmarks, in one run (<= 12 minutes on one CUDA GPU):
#   1. kernels: Triton `candidates` / `masked_logprob` GB/s against a device-to-device copy, bf16 and
#      fp32, V=157184, and their correctness against the torch references (OK / MISMATCH lines);
#   2. decoding: tokens/s of S vs Q, cache on vs off, compile off vs on, on a ~125M-parameter random
#      block-causal Llama in bfloat16, batch 8, prompt 256 + 256 new tokens;
#   3. native models: the real configs' memory (meta device), and every LLaDA / LLaDA-MoE / Dream /
#      LLaDA2.x checkpoint already in the local Hugging Face cache loaded into dllm_edit's native class
#      and decoded with two rules and, on full-attention families, the dual cache (nothing is downloaded).
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

step kernels 180 "$python" benchmarks/kernel_speed.py --gpu-only
step decode 270 "$python" benchmarks/decode_speed.py --device-grid --device cuda --dtype bfloat16 \
    --hidden 768 --layers 8 --vocab 32000 --batch 8 --prompt-len 256 --new-tokens 256 --repeats 3
step native 240 "$python" benchmarks/native_models.py --memory --decode --device cuda
grep -h "MISMATCH" "$out/kernels.md" && status=1 || true
echo "done: $out (status $status)"
exit "$status"
