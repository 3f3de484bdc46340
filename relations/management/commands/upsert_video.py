"""A video's snapshot from the command line: stand in for the video service with an explicit service
version, or set / clear the operator override on top of the service's snapshot (decision D50)."""

from likes_project.audit.services import cli_actor_resolve
from likes_project.cli import DomainCommand, user_by_username
from likes_project.errors import InvalidInput
from relations import validation
from relations.models import VideoStatus, VideoVisibility
from relations.selectors import VideoRecord
from relations.services.videos import (
    OVERRIDE_PERMISSION,
    video_override_clear,
    video_override_set,
    video_snapshot_upsert,
)


class Command(DomainCommand):
    help = (
        "Write a video's visibility snapshot, in one of three modes (exactly one is required). "
        "--service-version N: act as the video service and push its snapshot with service version N "
        "(--author required; --visibility defaults to public, --status to active; ignored unless N is above "
        "the stored service version, exactly like PUT /internal/v1/videos/<id>). "
        "--override: set the operator override of --visibility and/or --status on top of the service's "
        "snapshot (--reason required; audited); the service's version is untouched, so its next push still "
        "applies, and the override stays until cleared. "
        "--clear-override: remove the override; the video shows the service's snapshot again. "
        "--version is Django's own (prints Django's version)."
    )

    def add_arguments(self, parser):
        parser.add_argument("video_id")
        mode = parser.add_mutually_exclusive_group(required=True)
        mode.add_argument("--service-version", type=int, metavar="N",
                          help="Act as the video service: push its snapshot with this service version.")
        mode.add_argument("--override", action="store_true",
                          help="Set the operator override (--visibility and/or --status, --reason).")
        mode.add_argument("--clear-override", action="store_true", help="Remove the operator override.")
        parser.add_argument("--author", help="Author username (with --service-version only).")
        parser.add_argument("--visibility", choices=VideoVisibility.values, default=None,
                            help="With --service-version: the pushed visibility (default public). With "
                                 "--override: the overridden visibility (default: not overridden).")
        parser.add_argument("--status", choices=VideoStatus.values, default=None,
                            help="With --service-version: the pushed status (default active). With --override: "
                                 "the overridden status (default: not overridden).")
        parser.add_argument("--published-at", metavar="ISO",
                            help="With --service-version: when the video was published (ISO 8601 with its offset).")
        parser.add_argument("--reason", default="", help="Why (audited); required with --override.")
        self.add_actor_argument(parser)

    def run(self, *args, **options):
        video_id = validation.video_id(options["video_id"])
        actor = cli_actor_resolve(username=options.get("actor"), permission=OVERRIDE_PERMISSION)
        if options["service_version"] is not None:
            if not options["author"]:
                raise InvalidInput("--service-version needs --author.", code="invalid_author")
            author = user_by_username(options["author"])
            result = video_snapshot_upsert(
                video_id=video_id, author_id=author.pk, visibility=options["visibility"] or VideoVisibility.PUBLIC,
                status=options["status"] or VideoStatus.ACTIVE, version=options["service_version"], actor=actor,
                published_at=validation.published_at(options["published_at"]),
            )
            verb = "applied" if result.applied else "ignored (not newer than the stored service version)"
            self.stdout.write(f"{video_id}: service push v{options['service_version']} {verb}; "
                              f"{self._describe(result.record)}")
            return
        if options["author"]:
            raise InvalidInput("--author belongs to --service-version (an override never changes the author).",
                               code="invalid_author")
        if options["published_at"]:
            raise InvalidInput("--published-at belongs to --service-version.", code="invalid_published_at")
        if options["override"]:
            if options["visibility"] is None and options["status"] is None:
                raise InvalidInput("--override needs --visibility and/or --status.", code="invalid_override")
            result = video_override_set(video_id=video_id, visibility=options["visibility"], status=options["status"],
                                        reason=options["reason"], actor=actor)
            verb = "override set" if result.changed else "override unchanged"
        else:
            if options["visibility"] is not None or options["status"] is not None:
                raise InvalidInput("--clear-override takes no --visibility or --status.", code="invalid_override")
            result = video_override_clear(video_id=video_id, reason=options["reason"], actor=actor)
            verb = "override cleared" if result.changed else "no override to clear"
        self.stdout.write(f"{video_id}: {verb}; {self._describe(result.record)}")

    @staticmethod
    def _describe(record: VideoRecord) -> str:
        override = (f"override {record.override_visibility or '-'}/{record.override_status or '-'}"
                    if record.has_override else "no override")
        return (f"effective {record.visibility} {record.status}; service v{record.version} author={record.author_id} "
                f"{record.service_visibility} {record.service_status}; {override}")
