"""Data, training, export and serving of the ALBERT-style text classifier."""
