"""The one generation lifecycle: how a projection or cache is rebuilt into a new generation and
switched in, written once and used by the relation cache, the count cache, the reverse index and the
recovery restore (and next by repair and bucket-space changes).

    SHADOW -> BACKFILLING -> CATCHING_UP -> VERIFYING -> ACTIVE          (the previous ACTIVE -> RETIRED)
       \\__________\\______________\\______________\\-> FAILED

- A generation is a row of a model built on `GenerationModel`. From its creation (SHADOW) the live
  writers of that projection write it too (tail capture); readers use the ACTIVE one only.
- A user supplies a `Lifecycle`: how to create its row, and three steps (backfill, catch-up,
  verify). The engine owns states, leases, fencing, progress, audit and failure.
- The run happens in slices. A slice holds the lifecycle's lease (a fencing token; a zombie slice's
  writes to the generation row are refused), does chunks of the current step until its budget is
  spent, and persists the step's cursor after every chunk (renewing the lease), so the next slice
  resumes exactly there. A chunk that is long work of its own calls `ctx.tick()` as it goes, which
  renews the lease too. Every chunk is idempotent (versions or upserts decide), so redoing the chunk a
  crash interrupted is harmless.
- Any exception, the Celery time limit included, makes the generation FAILED at once, and readers
  stay on (or go back to) the ACTIVE one; so does a run older than its lifecycle's `time_limit_s`
  (checked at every chunk and tick, and before the switch). A holder that died without a word
  (SIGKILL, a lost node) is reclaimed: once its lease has expired, the next start of a rebuild, or the
  ops-job sweeper, marks its generation FAILED.
- The switch is the engine's CAS, inside the lifecycle's `switch` when that moves something of its own
  in the same transaction. A dry run (`params["dry_run"]`) is verified and RETIRED, never switched in.
- A run is an ops job of its own (`lifecycle_job_kind`), or a step of a bigger job that holds the
  lifecycle's lease itself from before `generation_start(..., grant=)` to the run's end.
- One audit record when a run starts (`<prefix>.rebuild_start`), one when it ends
  (`<prefix>.rebuild_activate`, `.rebuild_failed`, `.rebuild_abandoned`, or a dry run's
  `.rebuild_verified`), in the transaction of the state change they describe.
"""

from likes_project.generations.engine import (
    building_row,
    generation_abandon,
    generation_fail,
    generation_slice,
    generation_start,
)
from likes_project.generations.jobs import (
    RunReport,
    lifecycle_get,
    lifecycle_job_kind,
    lifecycle_register,
    rebuild_inline,
)
from likes_project.generations.lifecycle import (
    FenceLost,
    Lifecycle,
    RebuildFailed,
    RebuildRunning,
    RebuildTimedOut,
    StepContext,
    StepResult,
)
from likes_project.generations.models import (
    BUILDING,
    FINISHED,
    LIVE,
    STEPS,
    GenerationModel,
    GenerationStatus,
)

__all__ = [
    "BUILDING", "FINISHED", "LIVE", "STEPS", "FenceLost", "GenerationModel", "GenerationStatus", "Lifecycle",
    "RebuildFailed", "RebuildRunning", "RebuildTimedOut", "RunReport", "StepContext", "StepResult", "building_row",
    "generation_abandon", "generation_fail", "generation_slice", "generation_start", "lifecycle_get",
    "lifecycle_job_kind", "lifecycle_register", "rebuild_inline",
]
