"""The vocabulary-sized kernels (Triton and pure-torch) against their references."""
