"""Export every video a user likes, exactly as of one database snapshot (LIST-5), as JSON lines.

The file format is documented in `relations.services.export`. The file appears complete or not at
all: it is written to a temporary file next to --out and renamed over it at the end.
"""

from __future__ import annotations

import os
from pathlib import Path

from django.core.management.base import CommandError
from django.db import DatabaseError

from likes_project.audit.services import cli_actor_resolve
from likes_project.cli import JobCommand, user_by_username
from likes_project.cursors import iso_utc
from relations.jobs import LIKES_EXPORT
from relations.services.export import EXPORT_PERMISSION, user_likes_export


class Command(JobCommand):
    help = ("Write all of <username>'s likes to --out as JSON lines, exact as of one snapshot; progress "
            "goes to stderr, the as-of time to the file's header and to stdout.")

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--out", required=True, help="Destination file (replaced atomically when done).")
        parser.add_argument("--chunk-rows", type=int, default=None,
                            help="Rows per read and per progress line (default LIKES_EXPORT_CHUNK_ROWS, 1000).")
        self.add_job_arguments(parser)

    job_kind, permission = LIKES_EXPORT, EXPORT_PERMISSION

    def run(self, *args, **options):
        user = user_by_username(options["username"])
        actor = cli_actor_resolve(username=options.get("actor"), permission=EXPORT_PERMISSION)
        if options["chunk_rows"] is not None and options["chunk_rows"] < 1:
            raise CommandError("--chunk-rows must be at least 1.")
        out_path, tmp = self.out_file_open(options["out"])

        def progress(rows: int) -> None:
            self.stderr.write(f"{user.username}: {rows} likes exported...")

        if options.get("run_async"):
            return self._run_on_workers(user, tmp, out_path, options)
        try:
            with tmp:
                result = user_likes_export(user_id=user.pk, out=tmp, actor=actor, destination=str(out_path),
                                           progress=progress, chunk_rows=options["chunk_rows"])
            os.replace(tmp.name, out_path)
        except DatabaseError as exc:
            raise CommandError(f"Export failed, nothing written: {exc.__class__.__name__}: {exc}".strip()) from exc
        except OSError as exc:
            raise CommandError(f"Cannot write {out_path}: {exc.strerror or exc}.") from exc
        finally:
            if os.path.exists(tmp.name):
                os.unlink(tmp.name)
        self.stdout.write(
            f"Exported {result.row_count} likes of {user.username} (user {user.pk}, shard {result.alias}) "
            f"as of {iso_utc(result.as_of)} to {out_path}; {result.unlisted_count} of them on videos the list "
            f"hides (taken down, deleted or unknown), flagged listed=false."
        )

    def _run_on_workers(self, user, tmp, out_path: Path, options) -> None:
        """--async: the export job runs on a worker and writes its file where jobs keep theirs; this
        command follows it, then copies the file to --out (atomically, as in the foreground)."""
        try:
            job = self.job_run(options=options, target=f"user:{user.pk}",
                               params={"user_id": user.pk, "username": user.username, "destination": str(out_path)})
            self.job_file_deliver(job, tmp, out_path)
        finally:
            if os.path.exists(tmp.name):
                os.unlink(tmp.name)
        r = job.result
        self.stdout.write(f"Exported {r['rowCount']} likes of {user.username} (user {user.pk}, shard {r['shard']}) "
                          f"as of {r['asOf']} to {out_path} (job {job.pk}); {r['unlistedCount']} of them on videos "
                          f"the list hides (taken down, deleted or unknown), flagged listed=false.")
