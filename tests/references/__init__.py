"""Ports of the public decoders the algorithm zoo is matched to, written from reading the authors' code.

Each module restates one reference's selection function and block loop as the authors' code runs
them (repo:path@commit in its docstring), so tests can compare `dllm_edit.generate` with it in
tokens and forward count on tiny random models. Where a port departs from the reference (the
random draws come from a `torch.Generator` instead of the global RNG), its docstring says how.
"""
