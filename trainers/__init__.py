"""Edit-aware SFT and EBPO trainers (installed as `dllm_edit.trainers`).

Not implemented yet: see the open issues "Edit-aware SFT trainer" and "EBPO trainer". This package
exists so the installed layout (`dllm_edit.trainers`) is in place; it exports nothing.
"""

__all__: list[str] = []
