"""dllm_edit's decoder as a transformers `custom_generate` folder.

    model.generate(input_ids, custom_generate=dllm_edit.CUSTOM_GENERATE_DIR, trust_remote_code=True, ...)

transformers loads this file and calls `generate(model=..., **arguments of generate)`. It needs the
`dllm_edit` package installed; nothing is downloaded.
"""

from dllm_edit.hf import generate_hf


def generate(model, **kwargs):
    return generate_hf(model, **kwargs)
