"""The package with its surroundings: transformers, lm-eval, SGLang, the shipped model, examples, cookbook."""
