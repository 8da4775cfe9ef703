"""The speed / quality trade-off table: `dllm-edit bench` as a script (same options).

python benchmarks/tradeoff.py --plot tradeoff.png
python benchmarks/tradeoff.py --model m2t=runs/m2t-only --model edit=runs/default-model
"""

import sys

from dllm_edit.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
