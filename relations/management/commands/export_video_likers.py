"""Export every account that likes a video, for a stated purpose, as JSON lines (OPS-9, PRIV-1).

The export runs as an ops job (in the foreground with a progress bar, or with --async on the workers);
its file is copied to --out, which appears complete or not at all. The export and its purpose are
audited (`likers.export`). The file format is documented in `relations.services.export`.
"""

from __future__ import annotations

import os

from likes_project.cli import JobCommand, add_json_argument, emit
from likes_project.errors import InvalidInput
from relations import validation
from relations.jobs import LIKERS_EXPORT
from relations.services.export import LIKERS_EXPORT_PERMISSION


class Command(JobCommand):
    help = ("Write every account that likes <videoId> to --out as JSON lines, for the --purpose stated (audited, "
            f"permission {LIKERS_EXPORT_PERMISSION}); each relation shard's part is exact as of its own snapshot.")

    job_kind, permission = LIKERS_EXPORT, LIKERS_EXPORT_PERMISSION

    def add_arguments(self, parser):
        parser.add_argument("video_id", metavar="videoId")
        parser.add_argument("--purpose", required=True, help="Why the list is exported (recorded in the audit log).")
        parser.add_argument("--out", required=True, help="Destination file (replaced atomically when done).")
        self.add_job_arguments(parser)
        add_json_argument(parser)

    def run(self, *args, **options):
        video_id = validation.video_id(options["video_id"])
        purpose = options["purpose"].strip()
        if not purpose:
            raise InvalidInput("State the purpose of the export (--purpose).", code="purpose_required")
        out_path, tmp = self.out_file_open(options["out"])
        try:
            job = self.job_run(options=options, target=f"video:{video_id}",
                               params={"video_id": video_id, "purpose": purpose, "destination": str(out_path)})
            self.job_file_deliver(job, tmp, out_path)
        finally:
            if os.path.exists(tmp.name):
                os.unlink(tmp.name)
        r = job.result
        emit(self, options, {"jobId": job.pk, "videoId": video_id, "rowCount": r["rowCount"], "shards": r["shards"],
                             "out": str(out_path)},
             f"Exported {r['rowCount']} likers of {video_id} to {out_path} (job {job.pk}); shards as of "
             + ", ".join(f"{s} {at}" for s, at in sorted(r["shards"].items())))
