"""Relation facts and their evidence (relation shards), plus the video visibility snapshot and social
edges the command rules need (control plane, `default`).

Sharded models carry `db_family = "relation_shard"`; there are no foreign keys across aliases.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.db.models.functions import Coalesce

from likes_project.db_routers import RELATION_SHARD
from likes_project.generations import GenerationModel
from likes_project.hashing import HashContract, one_active
from likes_project.ledgers.model import TERMINAL, ApprovedLedgerModel, LedgerState
from likes_project.switches import GlobalPauseSwitch, PauseSwitch


class RelationState(models.TextChoices):
    LIKED = "LIKED"
    UNLIKED = "UNLIKED"


class VideoVisibility(models.TextChoices):
    PUBLIC = "public"
    FRIENDS = "friends"
    PRIVATE = "private"


class VideoStatus(models.TextChoices):
    ACTIVE = "active"
    TAKEN_DOWN = "taken_down"
    DELETED = "deleted"


# --- control plane (default) -------------------------------------------------------------------


class RelationShardContract(HashContract):
    """The frozen contract user_id -> logical slot (architecture §7). Never edited once created."""

    logical_slots = models.PositiveIntegerField()
    is_active = models.BooleanField(default=False)

    class Meta:
        constraints = [
            one_active("one_active_shard_contract"),
            models.CheckConstraint(condition=Q(logical_slots__gt=0), name="shard_contract_slots_positive"),
        ]

    def __str__(self) -> str:
        return f"relation shard contract v{self.version} ({self.hash_algorithm}, {self.logical_slots} slots)"


class RelationShardSlot(models.Model):
    """Logical slot -> relation shard alias, for one contract version."""

    contract_version = models.PositiveIntegerField()
    slot = models.PositiveIntegerField()
    alias = models.CharField(max_length=32)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["contract_version", "slot"], name="uniq_shard_slot"),
        ]

    def __str__(self) -> str:
        return f"v{self.contract_version} slot {self.slot} -> {self.alias}"


class VideoSnapshot(models.Model):
    """A video's visibility facts (CMD-12, E-22): the video service's snapshot as last pushed, and an
    operator override kept apart from it (decision D50).

    `service_visibility`, `service_status`, `author_id` and `version` are the service's: only a push
    with a higher version moves them, so an operator edit never consumes a service version. The
    `override_*` fields are the operator's (null: that field is not overridden). `visibility` and
    `status` are the effective values every reader uses: the override where there is one, else the
    service's; the check constraint keeps them so. `revision` grows with every applied change (push or
    override) and versions the visibility cache entry."""

    video_id = models.CharField(max_length=64, primary_key=True)
    author_id = models.BigIntegerField(db_index=True)
    visibility = models.CharField(max_length=16, choices=VideoVisibility.choices, default=VideoVisibility.PUBLIC)
    status = models.CharField(max_length=16, choices=VideoStatus.choices, default=VideoStatus.ACTIVE)
    version = models.BigIntegerField(default=1)
    # Database defaults too, so a raw INSERT written before these columns (bench/dataset.py) still
    # stores a consistent row: the service's public/active, no override, revision 1.
    service_visibility = models.CharField(max_length=16, choices=VideoVisibility.choices,
                                          default=VideoVisibility.PUBLIC, db_default=VideoVisibility.PUBLIC)
    service_status = models.CharField(max_length=16, choices=VideoStatus.choices, default=VideoStatus.ACTIVE,
                                      db_default=VideoStatus.ACTIVE)
    override_visibility = models.CharField(max_length=16, choices=VideoVisibility.choices, null=True, blank=True)
    override_status = models.CharField(max_length=16, choices=VideoStatus.choices, null=True, blank=True)
    override_reason = models.CharField(max_length=512, blank=True, default="", db_default="")
    override_by = models.CharField(max_length=150, blank=True, default="", db_default="")
    override_at = models.DateTimeField(null=True, blank=True)
    revision = models.BigIntegerField(default=1, db_default=1)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(version__gte=0), name="video_version_non_negative"),
            models.CheckConstraint(condition=Q(revision__gte=1), name="video_revision_positive"),
            models.CheckConstraint(
                condition=Q(visibility=Coalesce("override_visibility", "service_visibility"),
                            status=Coalesce("override_status", "service_status")),
                name="video_effective_is_override_over_service",
            ),
        ]

    def __str__(self) -> str:
        override = " overridden" if self.has_override else ""
        return f"{self.video_id} ({self.visibility}, {self.status}, v{self.version}{override})"

    @property
    def has_override(self) -> bool:
        return self.override_visibility is not None or self.override_status is not None


class Friendship(models.Model):
    """An undirected friendship, stored once with user_low < user_high."""

    user_low = models.BigIntegerField()
    user_high = models.BigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user_low", "user_high"], name="uniq_friendship"),
            models.CheckConstraint(condition=Q(user_low__lt=models.F("user_high")), name="friendship_ordered"),
        ]

    def __str__(self) -> str:
        return f"{self.user_low} <-> {self.user_high}"


class Block(models.Model):
    """`blocker` has blocked `blocked`: the blocked user may not like the blocker's videos."""

    blocker_id = models.BigIntegerField()
    blocked_id = models.BigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["blocker_id", "blocked_id"], name="uniq_block")]

    def __str__(self) -> str:
        return f"{self.blocker_id} blocks {self.blocked_id}"


# --- relation shards ---------------------------------------------------------------------------


class LikeRelation(models.Model):
    """VIDEO_LIKE_RELATION (E-1): the single current fact for (user, video). Unlike keeps the row as a
    versioned tombstone."""

    db_family = RELATION_SHARD

    user_id = models.BigIntegerField()
    video_id = models.CharField(max_length=64)
    state = models.CharField(max_length=8, choices=RelationState.choices)
    relation_version = models.BigIntegerField()
    last_operation_id = models.CharField(max_length=128)
    state_changed_at = models.DateTimeField()
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user_id", "video_id"], name="uniq_relation_user_video"),
            models.CheckConstraint(condition=Q(relation_version__gte=1), name="relation_version_positive"),
            models.CheckConstraint(condition=Q(state__in=["LIKED", "UNLIKED"]), name="relation_state_valid"),
        ]
        indexes = [
            # The liked list (LIST-1): (user_id, state, updated_at DESC, video_id DESC).
            models.Index("user_id", "state", models.F("updated_at").desc(), models.F("video_id").desc(),
                         name="relation_user_list_idx"),
            # Per-video reads of the facts: reconciliation and repair (issue 11 §3).
            models.Index(fields=["video_id", "user_id"], name="relation_video_idx"),
        ]
        # A video's likers are not public because its count is (PRIV-1): exporting them is its own
        # permission, held by no role by default (OPS-9).
        permissions = [("export_video_likers", "Can export a video's likers, with a stated purpose")]

    def __str__(self) -> str:
        return f"user {self.user_id} / {self.video_id}: {self.state} v{self.relation_version}"


class LikeCommand(models.Model):
    """LIKE_COMMAND (E-2): the fixed verdict of one operation id, bound to its user, video and desired
    state. Unique on (user_id, operation_id) so uniqueness holds inside one user shard (I3)."""

    db_family = RELATION_SHARD

    user_id = models.BigIntegerField()
    operation_id = models.CharField(max_length=128)
    video_id = models.CharField(max_length=64)
    desired_state = models.CharField(max_length=8, choices=RelationState.choices)
    result_state = models.CharField(max_length=8, choices=RelationState.choices)
    result_version = models.BigIntegerField()
    changed = models.BooleanField()
    base_version = models.BigIntegerField(null=True)
    device_id = models.CharField(max_length=128, blank=True, default="")
    client_sequence = models.BigIntegerField(null=True)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user_id", "operation_id"], name="uniq_command_user_operation"),
        ]
        indexes = [models.Index(fields=["created_at"], name="command_created_idx")]

    def __str__(self) -> str:
        return f"{self.operation_id} (user {self.user_id}, {self.video_id}) -> {self.result_state}"


class OutboxStatus(models.TextChoices):
    NEW = "NEW"
    PUBLISHING = "PUBLISHING"
    RETRY = "RETRY"
    UNCERTAIN = "UNCERTAIN"
    SENT = "SENT"
    DEAD = "DEAD"


class OutboxEvent(models.Model):
    """OUTBOX (E-3, consistency-techniques O1). `id` is the shard's `sourceCommitSeq`; `xact_id` is the
    writing transaction's `pg_current_xact_id()`, which lets the publisher only take rows whose
    transaction is older than every running one (architecture §4)."""

    db_family = RELATION_SHARD

    id = models.BigAutoField(primary_key=True)
    event_id = models.UUIDField(unique=True)
    aggregate_key = models.CharField(max_length=96)
    relation_version = models.BigIntegerField()
    event_type = models.CharField(max_length=48)
    schema_version = models.PositiveSmallIntegerField()
    payload = models.JSONField()
    xact_id = models.BigIntegerField()
    status = models.CharField(max_length=12, choices=OutboxStatus.choices, default=OutboxStatus.NEW)
    retry_count = models.PositiveIntegerField(default=0)
    next_retry_at = models.DateTimeField()
    claimed_by = models.CharField(max_length=64, blank=True, default="")
    claim_expires_at = models.DateTimeField(null=True)
    last_error = models.CharField(max_length=1024, blank=True, default="")
    stream_key = models.CharField(max_length=64, blank=True, default="")
    stream_entry_id = models.CharField(max_length=32, blank=True, default="")
    # The entry id split into numbers, so "published but not yet consumed" is an index range scan.
    stream_partition = models.PositiveIntegerField(null=True)
    stream_entry_ms = models.BigIntegerField(null=True)
    stream_entry_seq = models.BigIntegerField(null=True)
    created_at = models.DateTimeField()
    published_at = models.DateTimeField(null=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["aggregate_key", "relation_version", "event_type"], name="uniq_outbox_aggregate_version"
            ),
        ]
        indexes = [
            models.Index(fields=["next_retry_at"], name="outbox_pending_idx",
                         condition=Q(status__in=["NEW", "RETRY", "UNCERTAIN"])),
            models.Index(fields=["created_at"], name="outbox_created_idx"),
            models.Index(fields=["status", "id"], name="outbox_status_idx"),
            models.Index(fields=["stream_partition", "stream_entry_ms"], name="outbox_stream_pos_idx",
                         condition=Q(status="SENT")),
        ]
        permissions = [("requeue_outbox", "Can requeue DEAD outbox rows")]

    def __str__(self) -> str:
        return f"outbox #{self.id} {self.aggregate_key} v{self.relation_version} {self.status}"


class OutboxArchive(models.Model):
    """Published outbox rows past the retention window (OUT-7, O8): kept for audit and replay, out of
    the publisher's hot table. Moved in chunks by a beat job."""

    db_family = RELATION_SHARD

    id = models.BigIntegerField(primary_key=True)
    event_id = models.UUIDField(unique=True)
    aggregate_key = models.CharField(max_length=96)
    relation_version = models.BigIntegerField()
    event_type = models.CharField(max_length=48)
    schema_version = models.PositiveSmallIntegerField()
    payload = models.JSONField()
    stream_key = models.CharField(max_length=64)
    stream_entry_id = models.CharField(max_length=32)
    created_at = models.DateTimeField()
    published_at = models.DateTimeField()
    archived_at = models.DateTimeField()

    class Meta:
        # The evidence of one relation version (reconciliation's coverage, REC-4).
        indexes = [models.Index(fields=["aggregate_key", "relation_version"], name="outbox_archive_agg_idx")]

    def __str__(self) -> str:
        return f"archived outbox #{self.id} {self.aggregate_key} v{self.relation_version}"


class RelationCacheGeneration(GenerationModel):
    """CACHE_GENERATION (E-13): the relation cache's generations, durable so that a Redis flush
    clears neither the current generation nor a rebuild's state (RCACHE-7a). Rebuilt through the one
    generation lifecycle (`likes_project.generations`); while one is building, readers bypass Redis
    (RCACHE-4 step 2)."""

    # Baseline checkpoint vector W: per relation shard, the highest outbox id (sourceCommitSeq) at the
    # start of the baseline scan (RCACHE-7d/e).
    baseline_watermark = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta(GenerationModel.Meta):
        db_table = "relations_cachegeneration"
        permissions = [("rebuild_relation_cache", "Can rebuild the relation cache")]

    def __str__(self) -> str:
        return f"relation cache generation {self.generation} ({self.status})"


class LikeRelationCacheProjection(models.Model):
    """LIKE_RELATION_CACHE_PROJECTION (E-14): the durable version floor the Redis relation cache may
    not go below, per cache generation. It lives on the user's relation shard, next to the facts it
    mirrors: its writes are local to the shard the projector already routes by user (decision D22)."""

    db_family = RELATION_SHARD

    cache_generation = models.PositiveIntegerField()
    user_id = models.BigIntegerField()
    video_id = models.CharField(max_length=64)
    state = models.CharField(max_length=8, choices=RelationState.choices)
    relation_version = models.BigIntegerField()
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["cache_generation", "user_id", "video_id"], name="uniq_relcache_floor"),
        ]

    def __str__(self) -> str:
        return f"g{self.cache_generation} {self.user_id}:{self.video_id} >= v{self.relation_version}"


# --- likers privacy and account status (read by the likers API in counting) ------------------------


class UserPrivacy(models.Model):
    """A user's privacy settings on `default`; a missing row means the defaults (likes visible, own
    videos' likers not public). `likes_private` hides the user from other users' likers lists;
    `likers_public` is the author's per-author "anyone may see who liked my videos" setting."""

    user_id = models.BigIntegerField(primary_key=True)
    likes_private = models.BooleanField(default=False)
    likers_public = models.BooleanField(default=False)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"privacy of {self.user_id} (likes_private={self.likes_private}, likers_public={self.likers_public})"


class VideoLikersVisibility(models.Model):
    """A per-video override of the author's `likers_public` setting."""

    video_id = models.CharField(max_length=64, primary_key=True)
    likers_public = models.BooleanField()

    def __str__(self) -> str:
        return f"{self.video_id} likers_public={self.likers_public}"


class AccountStatusValue(models.TextChoices):
    ACTIVE = "active"
    BANNED = "banned"
    DELETED = "deleted"


class AccountStatus(models.Model):
    """Risk-control / lifecycle status of an account; a missing row means active."""

    user_id = models.BigIntegerField(primary_key=True)
    status = models.CharField(max_length=8, choices=AccountStatusValue.choices, default=AccountStatusValue.ACTIVE)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.user_id} {self.status}"


class LikesReadOnlySwitch(GlobalPauseSwitch):
    """Read-only likes (issue 14 §3, DEG-1 step 6): while set, every like command is refused with 503
    `likes_read_only` (the caller's current relation in the body) and writes nothing; reads are
    unaffected. One row, key "global"."""

    switch_kind = "read-only"
    switch_audit = ("likes.read_only_", "likes")
    switch_key_help = "no key (the whole service)"

    class Meta:
        verbose_name, verbose_name_plural = "read-only switch", "read-only switches"

    def __str__(self) -> str:
        return f"likes read-only: {'SET' if self.paused else 'off'}"


class OutboxPublisherSwitch(PauseSwitch):
    """Pause the outbox publisher of one relation shard (issue 14 §3, DEG-2): its rows wait in the
    outbox (commands still commit) and are published, none lost, once it is cleared."""

    switch_kind = "publisher"
    switch_audit = ("outbox.publisher_", "shard")
    switch_key_help = "a relation shard alias"

    shard = models.CharField(max_length=64, primary_key=True)

    class Meta:
        verbose_name, verbose_name_plural = "publisher switch", "publisher switches"

    @classmethod
    def switch_key_choices(cls) -> list[str]:
        from django.conf import settings

        return list(settings.RELATION_SHARD_ALIASES)

    def __str__(self) -> str:
        return f"publisher of {self.shard}: {'paused' if self.paused else 'running'}"


# --- relation slot moves (issue 16 §3; docs/slot-moves.md) ------------------------------------------


SlotMoveState = LedgerState  # the approved-ledger kit's states (likes_project.ledgers.model)


class RelationSlotMove(ApprovedLedgerModel):
    """The ledger of one move of logical relation slots from one shard to another (control plane): the kit's
    fields (state, who and why, the job, progress, the timeline), the slots, source and contract frozen at the
    plan, and what the catch-up applied. The copy's keyset (the kit's copy_cursor) is {"relations": last id,
    "commands": last id, "relations_end": .., ...}; write_pause_ms is the slots' exclusive locks taken -> released."""

    slots = models.JSONField(default=list)  # sorted logical slots
    source_alias = models.CharField(max_length=32)
    target_alias = models.CharField(max_length=32)
    contract_version = models.PositiveIntegerField()  # the active contract the plan froze
    new_contract_version = models.PositiveIntegerField(null=True, blank=True)  # created by the cutover
    captured_applied = models.BigIntegerField(default=0)  # capture ids the catch-up applied

    class Meta(ApprovedLedgerModel.Meta):
        permissions = [
            ("plan_relationslotmove", "Can plan a relation slot move"),
            ("approve_relationslotmove", "Can approve, resume or abort a relation slot move"),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(approved_by="") | ~Q(approved_by=models.F("requested_by")),
                                   name="slot_move_not_approved_by_requester"),
            models.CheckConstraint(condition=~Q(source_alias=models.F("target_alias")),
                                   name="slot_move_source_not_target"),
        ]

    def __str__(self) -> str:
        return f"slot move {self.pk}: {len(self.slots)} slots {self.source_alias} -> {self.target_alias} ({self.state})"


SLOT_MOVE_TERMINAL = TERMINAL


class SlotFenceState(models.TextChoices):
    CAPTURING = "CAPTURING"  # source, before the switch: writes go on and are captured
    INCOMING = "INCOMING"  # target, before the switch: not the owner, writes refused (`moved`)
    MOVED_OUT = "MOVED_OUT"  # source, after the switch: not the owner any more, writes refused for good


class RelationSlotState(models.Model):
    """On a relation shard: a logical slot a move is taking through this shard. No row: the shard is what the
    active contract says it is for the slot. Read by `likes_relation_apply` and the capture trigger
    (relations migration 0014)."""

    db_family = RELATION_SHARD

    slot = models.IntegerField(primary_key=True)
    state = models.CharField(max_length=12, choices=SlotFenceState.choices)
    move_id = models.BigIntegerField()
    hash_seed = models.CharField(max_length=64)
    logical_slots = models.IntegerField()
    changed_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"slot {self.slot}: {self.state} (move {self.move_id})"


class RelationSlotChange(models.Model):
    """On a source relation shard: the key of a relation or command row of a CAPTURING slot written since the
    capture began (the trigger of relations migration 0014). The catch-up re-copies the row and deletes this."""

    db_family = RELATION_SHARD

    id = models.BigAutoField(primary_key=True)
    move_id = models.BigIntegerField()
    kind = models.CharField(max_length=3)  # "rel" (key: video_id) or "cmd" (key: operation_id)
    user_id = models.BigIntegerField()
    key = models.CharField(max_length=128)

    class Meta:
        indexes = [models.Index(fields=["move_id", "id"], name="slotchange_move_idx")]

    def __str__(self) -> str:
        return f"move {self.move_id}: {self.kind} {self.user_id}/{self.key}"
