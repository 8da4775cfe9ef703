"""Training: EditSFT, EBPO, on-policy corruption, distributed runs and the training data."""
