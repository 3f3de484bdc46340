"""The count pipeline: `projection` (pipeline.py), `convergence`, `projector`; naive.py: the single-row baseline."""
