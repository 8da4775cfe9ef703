"""`python -m dllm_edit.cli ...` (what `accelerate launch -m dllm_edit.cli sft ...` runs)."""

import sys

from dllm_edit.cli import main

sys.exit(main())
