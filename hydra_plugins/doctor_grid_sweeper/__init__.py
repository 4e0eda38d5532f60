"""Hydra plugin package of the training-run doctor: the grid sweeper (hydra/sweeper=grid)."""
