"""Rebuild the reverse "who liked" index into a shadow generation and CAS-switch it (REV-4)."""

from django.core.management.base import CommandError
from django.db import transaction

from opsconsole.cli import DomainCommand
from opsconsole.services import audit_record, cli_actor_resolve
from relations.services.reverse_index import ReverseRebuildFailed, reverse_index_rebuild


class Command(DomainCommand):
    help = ("Create reverse index generation G+1 (SHADOW) with R shards, replay the relation facts into it while "
            "the projector writes both generations, sample-verify, then CAS-switch G+1 ACTIVE and G RETIRED. "
            "A failure leaves G+1 FAILED and G ACTIVE.")

    def add_arguments(self, parser):
        parser.add_argument("--shards", type=int, required=True, help="R, the number of reverse shards of G+1.")
        parser.add_argument("--sample", type=int, default=None, help="Relations to sample-verify (all shards).")
        self.add_actor_argument(parser)

    def run(self, *args, **options):
        actor = cli_actor_resolve(username=options.get("actor"),
                                  permission="relations.change_reverseindexgeneration")
        try:
            report = reverse_index_rebuild(shards=options["shards"], sample=options["sample"],
                                           progress=lambda msg: self.stderr.write(msg))
        except ReverseRebuildFailed as exc:
            raise CommandError(str(exc)) from exc
        with transaction.atomic(using="default", durable=True):
            audit_record(actor=actor, action="reverse.rebuild", target_type="reverse_generation",
                         target_id=str(report.generation), outcome=report.status.lower(),
                         params={"shards": report.shards, "previous": report.previous, "scanned": report.scanned,
                                 "caught_up": report.caught_up, "sampled": report.sampled,
                                 "mismatches": report.mismatches})
        self.stdout.write(f"generation {report.generation}: {report.status} (R={report.shards}, "
                          f"{report.scanned} replayed)")
        if report.status != "ACTIVE":
            raise CommandError(f"rebuild of reverse generation {report.generation} failed; "
                               f"generation {report.previous} stays ACTIVE")
