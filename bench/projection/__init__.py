"""The count pipeline: `bench/run.sh projection` (pipeline.py: the pipeline under a sustained load, then its
projectors at saturation on a replayed backlog, against a naive single-row counter), `bench/run.sh convergence`
(convergence.py: commit -> displayCount at 80% of the highest sustained load, the bench's loops and the real
Celery worker) and `bench/run.sh projector` (projector.py: the count projector at saturation against the raw SQL
ceiling of its own statements). naive.py: the single-row counter baseline."""
