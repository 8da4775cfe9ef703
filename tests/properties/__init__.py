"""Hypothesis properties of decoding: invariants every run and every registered strategy keeps."""
