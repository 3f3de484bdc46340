"""Recovery snapshots of the count projection and repair from them (spec §4.9 SNAP-4 … SNAP-11, REPAIR-2,
REPAIR-5, INV-16; issue 12).

- `artifacts`: the artifact format (gzip, a JSON header line naming the schema version, then COPY text
  rows) and its storage (the "recovery_snapshots" storage alias), streamed both ways;
- `snapshot`: the build at an exact cut of the event log (dispatch stopped by taking the count
  consumer's leases, the vector B[p] read, no receipt beyond it, one REPEATABLE READ snapshot per count
  partition), the seal after reading the artifacts back, verification and retention;
- `problems`: why a snapshot may not be sealed, or no longer be used (SNAP-9 … SNAP-11), each with its stable
  prefix: a missing, unreadable or misrecorded artifact, projection and buckets that disagree, a manifest
  not sealed or incomplete, a vector lacking a partition or below an earlier cut, a stream trimmed past
  nextOffset[p] or lost and written again, an offset gone backwards;
- `restore`: load a sealed snapshot into a new generation, replay each partition from its own
  nextOffset[p], check identity and coverage, fence and switch it in; the same into a scratch
  generation as the daily test-restore; the drop of replaced generations after their observation.
"""
