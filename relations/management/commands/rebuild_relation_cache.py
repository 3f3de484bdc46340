"""Rebuild the whole relation cache into a new generation (RCACHE-7), with progress."""

from django.core.management.base import CommandError
from django.db import transaction

from opsconsole.cli import DomainCommand
from opsconsole.services import audit_record, cli_actor_resolve
from relations.services.relation_cache import RebuildFailed, relation_cache_rebuild


class Command(DomainCommand):
    help = ("Create relation cache generation G+1, bypass Redis for reads, scan the relation facts, catch up, "
            "sample-verify and CAS-activate it. A failure leaves G+1 FAILED and the reads on the database.")

    def add_arguments(self, parser):
        self.add_actor_argument(parser)

    def run(self, *args, **options):
        actor = cli_actor_resolve(username=options.get("actor"), permission="relations.change_cachegeneration")
        try:
            report = relation_cache_rebuild(progress=lambda msg: self.stderr.write(msg))
        except RebuildFailed as exc:
            raise CommandError(str(exc)) from exc
        with transaction.atomic(using="default", durable=True):
            audit_record(actor=actor, action="relcache.rebuild", target_type="cache_generation",
                         target_id=str(report.generation), outcome=report.status.lower(),
                         params={"scanned": report.scanned, "caught_up": report.caught_up,
                                 "sampled": report.sampled, "mismatches": report.mismatches})
        self.stdout.write(f"generation {report.generation}: {report.status} ({report.scanned} scanned)")
        if report.status != "ACTIVE":
            raise CommandError(f"rebuild of generation {report.generation} failed; reads stay on the database")
