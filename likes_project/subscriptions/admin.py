"""Subscriptions in the console (issue 31 §1): each one's status, lag, position and last acknowledgement,
read-only; pause, resume and retire are actions that take a reason, through the service (audited). A
subscription is created with `manage.py subscription_create`, which prints its token once."""

from __future__ import annotations

from django.contrib import admin, messages

from likes_project.admin_kit import ReadOnlyAdmin, reason_action
from likes_project.audit.services import admin_actor
from likes_project.errors import DomainError
from likes_project.subscriptions import replay, selectors, services
from likes_project.subscriptions.models import Subscription, SubscriptionReplay, SubscriptionStatus


@admin.register(Subscription)
class SubscriptionAdmin(ReadOnlyAdmin):
    list_display = ("name", "owner", "status", "lag", "last_ack_at", "fields_text", "start_from", "created_at")
    list_filter = ("status", "owner")
    search_fields = ("name", "owner")
    fields = ("name", "owner", "purpose", "fields_text", "start_from", "status", "status_reason", "status_changed_at",
              "max_lag_s", "lag", "position_text", "last_ack_at", "created_by", "created_at")
    readonly_fields = ("fields_text", "lag", "position_text")
    actions = ["pause", "resume", "retire", "replay_request"]

    @admin.display(description="fields")
    def fields_text(self, sub: Subscription) -> str:
        return ", ".join(sub.fields)

    @admin.display(description="lag (s)")
    def lag(self, sub: Subscription) -> str:
        if sub.status not in (SubscriptionStatus.ACTIVE, SubscriptionStatus.PAUSED):
            return "-"
        return f"{services.lag_seconds(services.acked_positions(sub)):.1f}"

    @admin.display(description="position (partition: last acknowledged entry)")
    def position_text(self, sub: Subscription) -> str:
        return ", ".join(f"{p}: {i}" for p, i in selectors.subscription_report(sub)["position"].items())

    def has_manage_permission(self, request) -> bool:
        return request.user.has_perm(services.PERMISSION)

    def _move(self, request, queryset, move: str, intro: str):
        def apply(pks, reason):
            names = list(Subscription.objects.filter(pk__in=pks).values_list("name", flat=True))
            for name in names:
                services.subscription_move(name=name, move=move, actor=admin_actor(request.user), reason=reason)
            return f"{move.capitalize()}d {len(names)} subscription(s)."

        return reason_action(self, request, queryset, title=f"{move.capitalize()} subscriptions",
                             submit=move.capitalize(), intro=intro, apply=apply)

    @admin.action(description="Pause the selected subscriptions", permissions=["manage"])
    def pause(self, request, queryset):
        return self._move(request, queryset, "pause", "Their reads are refused; their positions still hold the log "
                                                      "back, until their lag passes their limit.")

    @admin.action(description="Resume the selected subscriptions", permissions=["manage"])
    def resume(self, request, queryset):
        return self._move(request, queryset, "resume", "They read on from where they acknowledged.")

    @admin.action(description="Retire the selected subscriptions", permissions=["manage"])
    def retire(self, request, queryset):
        return self._move(request, queryset, "retire", "For good: their tokens are refused and the log stops "
                                                       "holding back for them.")

    @admin.action(description="Request a replay from the archive (another operator approves it)",
                  permissions=["manage"])
    def replay_request(self, request, queryset):
        def apply(pks, reason):
            made = [replay.replay_request(name=name, actor=admin_actor(request.user), reason=reason)
                    for name in Subscription.objects.filter(pk__in=pks).values_list("name", flat=True)]
            return (f"Requested replay {', '.join(str(r.pk) for r in made)}; another operator approves it under "
                    "Subscription replays.")

        return reason_action(self, request, queryset, title="Replay subscriptions from the archive",
                             submit="Request the replay", apply=apply,
                             intro="For a subscription that fell behind its retention: once another operator "
                                   "approves, the system copies back what it missed and it reads on.")


@admin.register(SubscriptionReplay)
class SubscriptionReplayAdmin(ReadOnlyAdmin):
    """The replay requests: who asked, why, who approved, what was copied back. Approve and reject are actions
    for another operator (`subscriptions.approve_subscriptionreplay`); the system runs an approved one."""

    list_display = ("id", "subscription", "status", "reason", "requested_by", "approved_by", "replayed", "job_id",
                    "created_at", "finished_at")
    list_filter = ("status",)
    fields = ("subscription", "status", "reason", "params", "params_hash", "requested_by", "approved_by",
              "approved_at", "rejected_by", "job_id", "replayed", "error", "created_at", "finished_at")
    actions = ["approve", "reject"]

    def has_approve_permission(self, request) -> bool:
        return request.user.has_perm(replay.APPROVE_PERMISSION)

    @admin.action(description="Approve the selected replays (the system runs them)", permissions=["approve"])
    def approve(self, request, queryset):
        for pk in queryset.values_list("pk", flat=True):
            try:
                row = replay.replay_approve(replay_id=pk, actor=admin_actor(request.user))
                self.message_user(request, f"Approved replay {pk}; the system runs it as job {row.job_id}.")
            except DomainError as exc:
                self.message_user(request, f"Replay {pk} was not approved ({exc.code}): {exc.message}",
                                  messages.ERROR)

    @admin.action(description="Reject the selected replays", permissions=["approve"])
    def reject(self, request, queryset):
        def apply(pks, reason):
            for pk in pks:
                replay.replay_reject(replay_id=pk, actor=admin_actor(request.user), reason=reason)
            return f"Rejected {len(pks)} replay(s)."

        return reason_action(self, request, queryset, title="Reject replays", submit="Reject", apply=apply,
                             intro="Nothing is replayed; the request stays in the ledger with its reason.")
