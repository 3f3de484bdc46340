"""The count pipeline: `bench/run.sh projection` (pipeline.py), `convergence` (convergence.py) and `projector`
(projector.py); naive.py: the single-row counter baseline."""
