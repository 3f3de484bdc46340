"""Admin for the event-log control plane (`default`): the stream contract, leases and consumer
checkpoints (with the head each one is retrying, and until when it backs off) are read-only. Consumer
pause switches are edited through `consumer_switch_set`, which writes the audit record in the same
transaction. Dead letters are requeued (an ops job that applies them again, with progress) or
discarded with a reason (`likes_project.eventlog.redrive`).
"""

from __future__ import annotations

import json

from django import forms
from django.contrib import admin, messages
from django.utils import timezone
from django.utils.html import format_html

from likes_project.admin_kit import (
    PauseReasonForm,
    PauseSwitchAdmin,
    ReadOnlyAdmin,
    RuntimeSwitchAdmin,
    reason_action,
    start_job_or_message,
)
from likes_project.audit.services import admin_actor
from likes_project.eventlog import redrive
from likes_project.eventlog.models import (
    ConsumerCheckpoint,
    ConsumerPartitionSwitch,
    ConsumerSwitch,
    DeadLetter,
    Lease,
    LostTailWatermark,
    StreamContract,
)
from likes_project.eventlog.services import consumer_switch_set


@admin.register(StreamContract)
class StreamContractAdmin(ReadOnlyAdmin):
    list_display = ("version", "is_active", "topic", "partitions", "hash_algorithm", "hash_seed", "key_encoding",
                    "created_at")


@admin.register(Lease)
class LeaseAdmin(ReadOnlyAdmin):
    list_display = ("resource", "holder", "fencing_token", "expires_at", "expired", "acquired_at", "renewed_at")
    search_fields = ("resource", "holder")
    ordering = ("resource",)

    @admin.display(boolean=True, description="expired?")
    def expired(self, obj: Lease) -> bool:
        return obj.expires_at < timezone.now()


@admin.register(ConsumerCheckpoint)
class ConsumerCheckpointAdmin(ReadOnlyAdmin):
    list_display = ("consumer", "partition", "last_done_id", "blocked_entry_id", "blocked_attempts",
                    "blocked_reason", "blocked_since", "retry_at", "applied_total", "updated_at")
    list_filter = ("consumer",)
    ordering = ("consumer", "partition")
    list_per_page = 256


@admin.register(LostTailWatermark)
class LostTailWatermarkAdmin(ReadOnlyAdmin):
    list_display = ("shard", "partition", "checked_above", "updated_at")
    list_filter = ("shard",)
    ordering = ("shard", "partition")


# --- consumer switches -------------------------------------------------------------------------


def _known_consumers() -> list[str]:
    """Consumers that have run (a checkpoint) or have a switch: a switch for a mistyped name would
    pause nothing."""
    names = set(ConsumerCheckpoint.objects.values_list("consumer", flat=True).distinct())
    names |= set(ConsumerSwitch.objects.values_list("consumer", flat=True))
    return sorted(names)


class ConsumerSwitchForm(PauseReasonForm):
    pause_subject = "this consumer"

    class Meta(PauseReasonForm.Meta):
        model, fields = ConsumerSwitch, ("consumer", "paused", "reason")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "consumer" in self.fields:
            self.fields["consumer"] = forms.ChoiceField(
                choices=[(c, c) for c in _known_consumers()],
                help_text="A consumer that has a checkpoint (it has run at least once).",
            )


@admin.register(ConsumerSwitch)
class ConsumerSwitchAdmin(PauseSwitchAdmin):
    """Pause or resume a consumer's dispatch. Adding a switch is the same action on a consumer that
    has none yet."""

    form = ConsumerSwitchForm
    key_field = "consumer"
    list_filter = ("paused",)
    ordering = ("consumer",)

    def set_switch(self, *, key, paused, reason, actor):
        return consumer_switch_set(consumer=key, paused=paused, reason=reason, actor=actor)


@admin.register(ConsumerPartitionSwitch)
class ConsumerPartitionSwitchAdmin(RuntimeSwitchAdmin):
    """Pause or resume one consumer's dispatch on one stream partition (`count:3`); the others keep flowing."""

    list_filter = ("paused", "consumer")
    ordering = ("consumer", "partition")


# --- dead letters ------------------------------------------------------------------------------


@admin.register(DeadLetter)
class DeadLetterAdmin(ReadOnlyAdmin):
    list_display = ("id", "consumer", "status", "error_class", "video_id", "user_id", "stream_key", "entry_id",
                    "attempts", "first_failed_at", "last_failed_at")
    list_filter = ("consumer", "status", "error_class")
    search_fields = ("=video_id", "=event_id", "=entry_id")
    ordering = ("-first_failed_at",)
    date_hierarchy = "first_failed_at"
    fields = ("consumer", "status", "stream_key", "entry_id", "event_id", "video_id", "user_id", "error_class",
              "error_text", "payload_json", "attempts", "first_failed_at", "last_failed_at", "resolver", "reason",
              "resolved_at")
    readonly_fields = ("error_text", "payload_json")
    actions = ["requeue", "discard"]

    @admin.action(description="Requeue: apply the selected dead letters again", permissions=["requeue"])
    def requeue(self, request, queryset):
        """Starts the requeue job for the selected NEW dead letters and shows its page (progress, and
        how many were resolved, are still poison or wait for their store)."""
        ids = list(queryset.filter(status="NEW").values_list("id", flat=True))
        if not ids:
            self.message_user(request, "None of the selected dead letters is NEW.", messages.WARNING)
            return None
        return start_job_or_message(request, self.admin_site, kind=redrive.REQUEUE_JOB, params={"ids": ids})

    @admin.action(description="Discard the selected dead letters (with a reason)", permissions=["discard"])
    def discard(self, request, queryset):
        def apply(ids, reason):
            n = redrive.dead_letters_discard(ids=ids, actor=admin_actor(request.user), reason=reason)
            return f"Discarded {n} dead letters."

        return reason_action(self, request, queryset, title="Discard dead letters", submit="Discard",
                             intro="Discarded events are given up for good: no projection will apply them. The rows "
                                   "stay, with who discarded them and why, and the discard is audited.",
                             apply=apply)

    def has_requeue_permission(self, request):
        return request.user.has_perm(redrive.REQUEUE_PERMISSION)

    def has_discard_permission(self, request):
        return request.user.has_perm(redrive.DISCARD_PERMISSION)

    @admin.display(description="error")
    def error_text(self, obj: DeadLetter) -> str:
        return format_html('<pre class="dead-letter-error">{}</pre>', obj.error)

    @admin.display(description="payload")
    def payload_json(self, obj: DeadLetter) -> str:
        return format_html('<pre class="dead-letter-payload">{}</pre>',
                           json.dumps(obj.payload, indent=2, sort_keys=True, ensure_ascii=False))
