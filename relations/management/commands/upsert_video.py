"""Push a video visibility snapshot, as the video service would."""

from likes_project.audit.services import cli_actor_resolve
from likes_project.cli import DomainCommand, user_by_username
from relations import validation
from relations.models import VideoStatus, VideoVisibility
from relations.services.videos import video_snapshot_upsert


class Command(DomainCommand):
    help = "Create or update a video's visibility snapshot (the next version unless --version is given)."

    def create_parser(self, prog_name, subcommand, **kwargs):
        # `--version N` (the snapshot version) is this command's documented option; it replaces
        # Django's base `--version` (print Django's version), which otherwise makes argparse refuse
        # to build the parser at all.
        return super().create_parser(prog_name, subcommand, conflict_handler="resolve", **kwargs)

    def add_arguments(self, parser):
        parser.add_argument("video_id")
        parser.add_argument("--author", required=True, help="Author username.")
        parser.add_argument("--visibility", default=VideoVisibility.PUBLIC, choices=VideoVisibility.values)
        parser.add_argument("--status", default=VideoStatus.ACTIVE, choices=VideoStatus.values)
        parser.add_argument("--version", type=int, default=None, help="Explicit version (default: current + 1).")
        self.add_actor_argument(parser)

    def run(self, *args, **options):
        video_id = validation.video_id(options["video_id"])
        author = user_by_username(options["author"])
        actor = cli_actor_resolve(username=options.get("actor"), permission="relations.change_videosnapshot")
        result = video_snapshot_upsert(
            video_id=video_id, author_id=author.pk, visibility=options["visibility"],
            status=options["status"], version=options["version"], actor=actor,
        )
        v = result.video
        verb = "applied" if result.applied else "ignored (not newer than the stored version)"
        self.stdout.write(f"{v.video_id}: author={v.author_id} {v.visibility} {v.status} v{v.version} {verb}")
