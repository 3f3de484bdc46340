"""Admin for the event-log control plane (`default`): the stream contract, leases, consumer
checkpoints and the dead-letter queue are shown read-only (requeue and discard come with the repair
issue). Consumer pause switches are edited through `consumer_switch_set`, which writes the audit
record in the same transaction.
"""

from __future__ import annotations

import json

from django import forms
from django.contrib import admin
from django.utils import timezone
from django.utils.html import format_html

from likes_project.admin_kit import PauseReasonForm, PauseSwitchAdmin, ReadOnlyAdmin
from likes_project.eventlog.models import ConsumerCheckpoint, ConsumerSwitch, DeadLetter, Lease, StreamContract
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
                    "applied_total", "updated_at")
    list_filter = ("consumer",)
    ordering = ("consumer", "partition")
    list_per_page = 256


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
              "error_text", "payload_json", "attempts", "first_failed_at", "last_failed_at", "resolver", "reason")
    readonly_fields = ("error_text", "payload_json")

    @admin.display(description="error")
    def error_text(self, obj: DeadLetter) -> str:
        return format_html('<pre class="dead-letter-error">{}</pre>', obj.error)

    @admin.display(description="payload")
    def payload_json(self, obj: DeadLetter) -> str:
        return format_html('<pre class="dead-letter-payload">{}</pre>',
                           json.dumps(obj.payload, indent=2, sort_keys=True, ensure_ascii=False))
