"""`dllm-edit eval`: lm-evaluation-harness with the `dllm_edit` model registered.

Every argument goes to lm-eval's own command line (`lm-eval run ...`); `--model dllm_edit` is added
when no `--model` is given. Under `accelerate launch -m dllm_edit.cli eval ...` each process takes
its shard of the requests.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

USAGE = """usage: dllm-edit eval [lm-eval run options]

Runs lm-evaluation-harness (`lm-eval run`) with the dllm_edit model registered; --model defaults to
dllm_edit. Examples:
  dllm-edit eval --tasks my_task --include_path tasks/ --model_args mode=speedy,max_new_tokens=64
  dllm-edit eval --tasks gsm8k --model_args pretrained=PATH,trust_remote_code=True,threshold=0.6 \\
      --batch_size 8 --output_path results/
  accelerate launch --num_processes 2 -m dllm_edit.cli eval --tasks gsm8k --model_args pretrained=PATH

--model_args: pretrained (default: the shipped model), tokenizer, mode (speedy|quality), dtype,
trust_remote_code, revision, attn_implementation, adapter, device, mc_num (ELBO draws for
loglikelihood tasks), seed, max_length, and any EditGenerationConfig field (threshold,
editing_threshold=None, block_length, max_new_tokens, ...). lm-eval's own options: lm-eval run --help.
"""


def run(argv: Sequence[str]) -> int:
    args = list(argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if args else 2
    try:
        from lm_eval.__main__ import cli_evaluate

        import dllm_edit.lm_eval  # noqa: F401  (registers the model)
        from dllm_edit.lm_eval.distributed import end_process_group
    except ImportError as err:
        raise ImportError(
            f'dllm-edit eval needs lm-evaluation-harness: pip install "dllm-edit[eval]" ({err})'
        ) from err
    if args[0] != "run":
        args.insert(0, "run")
    if not any(a == "--model" or a.startswith("--model=") for a in args):
        args += ["--model", "dllm_edit"]
    saved = sys.argv
    sys.argv = ["lm-eval", *args]
    try:
        cli_evaluate()
    except SystemExit as exit_:  # argparse errors and --help inside lm-eval
        return exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    finally:
        sys.argv = saved
        end_process_group()
    return 0
