"""Admin for reconciliation (issue 11; OPS-4, OPS-7, OPS-8): check runs, their diffs and repair
requests, all read-only tables. The only writes are these, each through its service, which checks the
workflow and writes the audit record:

* "Start a check" (`reconciliation.run_check`): a form (mode; videos one a line, or all) that starts
  the check as an ops job (`reconciliation.jobs`) and shows the job's page; nothing runs in the request.
* On diffs (`reconciliation.triage_diff`, a reason each): take (FIXING), ignore, reopen
  (`diffs.diffs_set_status`); and (`reconciliation.request_repair`, a reason) request a repair of the
  selected diffs' videos from the facts (`repair.repair_request`).
* "Request a repair" (`reconciliation.request_repair`): the same for videos typed one a line.
* Approve (`reconciliation.approve_repair`), a button on a repair's page and an action: through
  `repair.repair_approve`, which refuses the requester (superusers included) and starts the system's
  repair job. A refusal is a message; nothing changes.

Recovery snapshots (issue 12), read-only too; `reconciliation.create_snapshot` may:

* "Take a snapshot" (a reason): starts the snapshot job (`jobs.SNAPSHOT_JOB`), which creates the row and
  builds it on the workers; the job's page follows. Nothing is built in the request.
* Verify and Test-restore, buttons on a snapshot's page and actions (one snapshot each): start their
  jobs the same way. Their verdicts are audited by the services when the jobs run.

A restore is a repair: "Restore from this snapshot" on a SEALED snapshot's page opens "Request a repair"
with the snapshot chosen (`reconciliation.request_repair`), and another operator approves it as any.

A refused step is an error message or a form error, never a 500.
"""

from __future__ import annotations

import json

from django.contrib import admin, messages
from django.http import HttpResponseRedirect
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.views.decorators.http import require_http_methods, require_POST

from likes_project.admin_kit import (
    AdminPage,
    ReadOnlyAdmin,
    RuntimeSwitchAdmin,
    job_form_page,
    query_initial,
    reason_action,
    render_page,
    require_permission,
    start_job_or_message,
)
from likes_project.audit.services import admin_actor
from likes_project.errors import DomainError
from likes_project.opsjobs.models import OpsJob
from reconciliation.forms import FACTS, CheckStartForm, RepairRequestForm, SnapshotTakeForm
from reconciliation.jobs import (
    SNAPSHOT_JOB,
    SNAPSHOT_PERMISSION,
    SNAPSHOT_TEST_JOB,
    SNAPSHOT_VERIFY_JOB,
    job_for_mode,
)
from reconciliation.models import (
    AutoRepairSwitch,
    CheckDiff,
    CheckRun,
    DiffStatus,
    DiffTransition,
    RecoverySnapshot,
    RepairRequest,
)
from reconciliation.services import diffs, repair
from reconciliation.services.checks import RUN_PERMISSION
from reconciliation.services.recovery.snapshot import snapshot_get

DIFFS_SHOWN = 100  # diffs listed on a run's page (the rest are one link away)


def _url(name: str, *args, query: dict | None = None) -> str:
    return reverse(f"admin:{name}", args=args) + (f"?{urlencode(query)}" if query else "")


def _link(name: str, pk, text=None) -> str:
    if pk is None:
        return "-"
    return format_html('<a href="{}">{}</a>', _url(name, pk), pk if text is None else text)


def _json(value, css: str) -> str:
    return format_html('<pre class="{}">{}</pre>', css, json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False,
                                                                    default=str))


def _audit_link(target_type: str, target_id) -> str:
    url = _url("audit_auditrecord_changelist", query={"target_type": target_type, "target_id": target_id})
    return format_html('<a href="{}">the audit records of {} {}</a>', url, target_type.replace("_", " "), target_id)


class StatusAdmin(ReadOnlyAdmin):
    """Read-only, with the status shown as the CLI, the API and the messages spell it (SUCCEEDED,
    FIXING), not as its label ("Succeeded"): operators compare them."""

    @admin.display(description="status", ordering="status")
    def status_code(self, obj) -> str:
        return format_html('<span class="status-code">{}</span>', obj.status)


def _videos_text(videos: list[str], shown: int = 5) -> str:
    more = len(videos) - shown
    return ", ".join(videos[:shown]) + (f" (+{more} more)" if more > 0 else "")


# --- check runs --------------------------------------------------------------------------------


@require_http_methods(["GET", "POST"])
def check_start_view(request, *, admin_site):
    """The form that starts a check as an ops job (the job's page follows it)."""
    return job_form_page(
        request, admin_site, form_class=CheckStartForm, permission=RUN_PERMISSION, title="Start a check",
        submit="Start the check",
        intro="Proves the counts of the videos named (or of all videos) at recorded watermarks, as an ops job on the "
              "workers; its page shows the progress and the run's verdict. Disagreements become diffs to triage. "
              "An exact check holds a short write barrier on its videos; if the barrier cannot be held it is "
              "REFUSED, never PASSED.",
        start=lambda data: (job_for_mode(data["mode"]), {"mode": data["mode"], "scope": data["scope"]},
                            f"{data['mode']} check"),
    )


@admin.register(CheckRun)
class CheckRunAdmin(StatusAdmin):
    list_display = ("id", "mode", "kind", "status_code", "scope_text", "checked", "diffs_found", "barrier_held_ms",
                    "refused_because", "created_at", "finished_at")
    list_filter = ("mode", "status", "kind")
    search_fields = ("=id", "=actor", "schedule")
    ordering = ("-id",)
    fields = ("mode", "kind", "status_code", "scope_text", "checked", "total", "diffs_found", "diffs_fixed",
              "barrier_held_ms", "refused_because", "watermarks_json", "skipped_json", "diffs_table", "actor",
              "channel", "schedule", "job_link", "repair_link", "checkpoint", "audit_link", "created_at",
              "started_at", "finished_at")
    readonly_fields = ("status_code", "scope_text", "watermarks_json", "skipped_json", "diffs_table", "job_link",
                       "repair_link", "audit_link")
    change_list_template = "reconciliation/admin/checkrun_change_list.html"
    change_form_template = "reconciliation/admin/checkrun_change_form.html"
    pages = [AdminPage("start/", check_start_view, name="reconciliation_check_start", title="Start a check",
                       permission=RUN_PERMISSION)]

    @admin.display(description="scope")
    def scope_text(self, run: CheckRun) -> str:
        scope = run.scope or {}
        if scope.get("all"):
            return "all videos"
        if "bucketRange" in scope:
            low, high = scope["bucketRange"]
            return f"all videos, virtual buckets {low}..{high}"
        videos = scope.get("videos", [])
        return f"{len(videos)} video(s): {_videos_text(videos)}"

    @admin.display(description="watermarks")
    def watermarks_json(self, run: CheckRun) -> str:
        return _json(run.watermarks, "run-watermarks")

    @admin.display(description="skipped")
    def skipped_json(self, run: CheckRun) -> str:
        return _json(run.skipped, "run-skipped") if run.skipped else "none"

    @admin.display(description="diffs")
    def diffs_table(self, run: CheckRun) -> str:
        shown = list(run.diffs.order_by("id")[:DIFFS_SHOWN])
        if not shown:
            return "none"
        rows = format_html_join("", '<tr class="run-diff"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>'
                                    "<td>{}</td><td>{}</td></tr>",
                                ((_link("reconciliation_checkdiff_change", d.pk), d.video_id,
                                  "-" if d.virtual_bucket is None else d.virtual_bucket, d.get_layer_display(),
                                  d.expected, d.actual, d.status) for d in shown))
        every = _url("reconciliation_checkdiff_changelist", query={"run__id__exact": run.pk})
        return format_html('<table class="run-diffs"><thead><tr><th>diff</th><th>video</th><th>virtual bucket</th>'
                           "<th>layer</th><th>expected</th><th>actual</th><th>status</th></tr></thead>"
                           '<tbody>{}</tbody></table><p><a href="{}">all diffs of run {}</a></p>', rows, every, run.pk)

    @admin.display(description="ops job")
    def job_link(self, run: CheckRun) -> str:
        return _link("opsjobs_opsjob_change", run.job_id)

    @admin.display(description="verifies repair")
    def repair_link(self, run: CheckRun) -> str:
        return _link("reconciliation_repairrequest_change", run.repair_id)

    @admin.display(description="audit")
    def audit_link(self, run: CheckRun) -> str:
        return _audit_link("check_run", run.pk)


# --- diffs -------------------------------------------------------------------------------------


def _transitions_rows(diff: CheckDiff) -> str:
    rows = format_html_join("", '<tr class="diff-transition"><td>{}</td><td>{}</td><td>{}</td><td>{}</td>'
                                "<td>{}</td></tr>",
                            ((f"{t.at:%Y-%m-%d %H:%M:%S}", t.from_status, t.to_status, t.actor, t.reason)
                             for t in diff.transitions.order_by("id")))
    return format_html('<table class="diff-transitions"><thead><tr><th>at (UTC)</th><th>from</th><th>to</th>'
                       "<th>by</th><th>reason</th></tr></thead><tbody>{}</tbody></table>", rows) if rows else "none"


@admin.register(CheckDiff)
class CheckDiffAdmin(StatusAdmin):
    """A run's disagreements, with their workflow. Each action asks for a reason first."""

    list_display = ("id", "run_link", "video_id", "virtual_bucket", "layer", "expected", "actual", "status_code",
                    "owner", "repair_link", "created_at")
    list_filter = ("layer", "status", "run__mode")
    search_fields = ("=video_id",)
    search_help_text = "A video id"
    ordering = ("-id",)
    list_select_related = ("run",)
    fields = ("run_link", "video_id", "virtual_bucket", "layer", "expected", "actual", "difference", "status_code",
              "owner", "reason", "status_changed_at", "repair_link", "transitions_table", "detail_json", "audit_link",
              "created_at")
    readonly_fields = ("status_code", "run_link", "difference", "repair_link", "transitions_table", "detail_json",
                       "audit_link")
    actions = ["take", "ignore", "reopen", "request_repair"]

    def has_triage_permission(self, request) -> bool:
        return request.user.has_perm(diffs.TRIAGE_PERMISSION)

    def has_request_permission(self, request) -> bool:
        return request.user.has_perm(repair.REQUEST_PERMISSION)

    def _set_status(self, request, queryset, *, to: str, title: str, submit: str, intro: str):
        def apply(ids, reason):
            done = diffs.diffs_set_status(ids=ids, to=to, actor=admin_actor(request.user), reason=reason)
            return f"{len(done)} diff(s) now {to}: {', '.join(str(d.pk) for d in done)}."

        return reason_action(self, request, queryset, title=title, submit=submit, intro=intro, apply=apply)

    @admin.action(description="Take the selected diffs (FIXING)", permissions=["triage"])
    def take(self, request, queryset):
        return self._set_status(request, queryset, to=DiffStatus.FIXING, title="Take diffs", submit="Take",
                                intro="You become the owner of these diffs while you fix them (NEW -> FIXING). "
                                      "The change is recorded on each diff and audited, with your reason.")

    @admin.action(description="Ignore the selected diffs", permissions=["triage"])
    def ignore(self, request, queryset):
        return self._set_status(request, queryset, to=DiffStatus.IGNORED, title="Ignore diffs", submit="Ignore",
                                intro="These diffs will not be fixed (a known, accepted disagreement). They can be "
                                      "reopened later; the change is recorded and audited, with your reason.")

    @admin.action(description="Reopen the selected diffs (NEW)", permissions=["triage"])
    def reopen(self, request, queryset):
        return self._set_status(request, queryset, to=DiffStatus.NEW, title="Reopen diffs", submit="Reopen",
                                intro="FIXING or IGNORED diffs become NEW again, without an owner's fix. The change is "
                                      "recorded and audited, with your reason.")

    @admin.action(description="Request a repair from the facts for the selected diffs", permissions=["request"])
    def request_repair(self, request, queryset):
        def apply(ids, reason):
            req = repair.repair_request(actor=admin_actor(request.user), source="facts", reason=reason, diff_ids=ids)
            return format_html('Requested <a href="{}" class="repair-requested">repair {}</a> of {} video(s) from '
                               "the facts; it waits for another operator's approval.",
                               _url("reconciliation_repairrequest_change", req.pk), req.pk, len(req.video_ids))

        return reason_action(self, request, queryset, title="Request a repair from the facts", submit="Request repair",
                             intro="Asks for the selected diffs' videos to be rebuilt from the relation facts (only "
                                   "the broken layer of each). The diffs become FIXING, linked to the request. It "
                                   "runs once a different operator approves it.", apply=apply)

    @admin.display(description="run", ordering="run_id")
    def run_link(self, diff: CheckDiff) -> str:
        return _link("reconciliation_checkrun_change", diff.run_id, f"{diff.run_id} ({diff.run.mode})")

    @admin.display(description="actual - expected")
    def difference(self, diff: CheckDiff) -> str:
        return f"{diff.actual - diff.expected:+d}"

    @admin.display(description="repair")
    def repair_link(self, diff: CheckDiff) -> str:
        return _link("reconciliation_repairrequest_change", diff.repair_id)

    @admin.display(description="transitions")
    def transitions_table(self, diff: CheckDiff) -> str:
        return _transitions_rows(diff)

    @admin.display(description="evidence")
    def detail_json(self, diff: CheckDiff) -> str:
        return _json(diff.detail, "diff-detail")

    @admin.display(description="audit")
    def audit_link(self, diff: CheckDiff) -> str:
        return _audit_link("diff", diff.pk)


@admin.register(DiffTransition)
class DiffTransitionAdmin(ReadOnlyAdmin):
    list_display = ("id", "diff_link", "from_status", "to_status", "actor", "reason", "at")
    list_filter = ("to_status",)
    search_fields = ("=diff__id", "=actor")
    ordering = ("-id",)

    @admin.display(description="diff", ordering="diff_id")
    def diff_link(self, t: DiffTransition) -> str:
        return _link("reconciliation_checkdiff_change", t.diff_id)


# --- repairs -----------------------------------------------------------------------------------


def _repair_url(repair_id) -> str:
    return _url("reconciliation_repairrequest_change", repair_id)


@require_http_methods(["GET", "POST"])
def repair_request_view(request, *, admin_site):
    """Request a repair of the videos typed (one a line) from the facts, or of the whole projection from a
    SEALED snapshot (`?source=snapshot:<id>` chooses it: a snapshot's "Restore" link); shows the request's
    page."""
    require_permission(request, repair.REQUEST_PERMISSION)
    wanted = request.GET.get("source", FACTS)
    form = RepairRequestForm(request.POST if request.method == "POST" else None,
                             initial={**query_initial(request, RepairRequestForm), "source": wanted})
    if request.method == "GET" and not form.offers(wanted):
        messages.warning(request, f"{wanted} is not a sealed snapshot (any more); choose what to repair from.")
        form.initial["source"] = FACTS
    if form.is_valid():
        source, videos = form.cleaned_data["source"], form.cleaned_data["videos"]
        try:
            req = repair.repair_request(actor=admin_actor(request.user), source=source,
                                        reason=form.cleaned_data["reason"], videos=videos or None)
        except DomainError as exc:
            form.add_error(None, exc.message)
        else:
            what = (f"of {len(req.video_ids)} video(s) from the facts" if source == FACTS else
                    f"of the whole projection from {source}")
            messages.success(request, f"Requested repair {req.pk} {what}; it waits for another operator's "
                                      "approval.")
            return HttpResponseRedirect(_repair_url(req.pk))
    return render_page(request, admin_site, "admin_kit/form_page.html", title="Request a repair", form=form,
                       submit="Request the repair",
                       intro="From the facts: rebuilds these videos' counts from the relation facts; per video the "
                             "broken layer is found first (projection, buckets or display) and only it is rebuilt. "
                             "From a sealed snapshot: the whole projection is loaded from it into a new generation, "
                             "the event log replayed from its offsets, checked, and switched in. Either way an exact "
                             "check verifies the result, and it runs only once a different operator approved exactly "
                             "these parameters. Prefer requesting a repair from a check's diffs, which records why.")


def _restored_snapshot(req: RepairRequest) -> int | None:
    """The snapshot a restore request names (`snapshot:<id>`), None for a repair from the facts."""
    raw = req.params.get("source", "")
    number = raw[len(repair.SNAPSHOT_SOURCE):]
    if not raw.startswith(repair.SNAPSHOT_SOURCE) or not (number.isascii() and number.isdigit()):
        return None
    return int(number)


def _totals_before_after(req: RepairRequest) -> str:
    """A restore's before / after: whole generations' totals (`restore.generation_totals`), not videos."""
    rows = [(label, req.before.get(key, "-"), req.after.get(key, "-")) for key, label in
            (("generation", "generation"), ("likedRelations", "LIKED relations"), ("bucketSum", "sum of buckets"))]
    body = format_html_join("", '<tr class="repair-total"><td>{}</td><td>{}</td><td>{}</td></tr>', rows)
    return format_html('<table class="repair-before-after"><thead><tr><th>whole projection</th><th>before</th>'
                       "<th>after</th></tr></thead><tbody>{}</tbody></table>", body)


def _approve(request, repair_id) -> bool:
    """One approval through the service, its outcome as a message."""
    try:
        req = repair.repair_approve(repair_id=repair_id, actor=admin_actor(request.user))
    except DomainError as exc:
        code = exc.as_dict().get("code", exc.code)  # a Conflict's own code travels in its extra
        messages.error(request, f"Repair {repair_id} was not approved ({code}): {exc.message}")
        return False
    messages.success(request, format_html('Approved repair {}; the system runs it as <a href="{}">job {}</a>.',
                                          req.pk, _url("opsjobs_opsjob_change", req.job_id), req.job_id))
    return True


@require_POST
def repair_approve_view(request, repair_id: int, *, admin_site):
    """The Approve button of a repair's page (POST only); back to the page, with the outcome."""
    require_permission(request, repair.APPROVE_PERMISSION)
    _approve(request, repair_id)
    return HttpResponseRedirect(_repair_url(repair_id))


@admin.register(RepairRequest)
class RepairRequestAdmin(StatusAdmin):
    """Repair requests (OPS-7): who asked, who approved, exactly which parameters, before / after, both
    watermark sets, the job that ran it and the exact check that verified it."""

    list_display = ("id", "status_code", "videos_text", "requested_by", "approved_by", "created_at", "finished_at",
                    "job_link", "verify_link")
    list_filter = ("status",)
    search_fields = ("reason",)  # see get_search_results: a video id
    search_help_text = "A video id"
    ordering = ("-id",)
    fields = ("status_code", "videos_text", "source", "reason", "requested_by", "requested_channel", "approved_by",
              "approved_at", "params_json", "params_hash", "approved_hash", "before_after", "before_json",
              "after_json", "watermarks_before_json", "watermarks_after_json", "result_json", "error", "job_link",
              "verify_link", "diffs_link", "audit_link", "created_at", "finished_at")
    readonly_fields = ("status_code", "videos_text", "source", "params_json", "before_after", "before_json",
                       "after_json", "watermarks_before_json", "watermarks_after_json", "result_json", "job_link",
                       "verify_link", "diffs_link", "audit_link")
    actions = ["approve"]
    change_list_template = "reconciliation/admin/repairrequest_change_list.html"
    change_form_template = "reconciliation/admin/repairrequest_change_form.html"
    pages = [
        AdminPage("request/", repair_request_view, name="reconciliation_repair_request", title="Request a repair",
                  permission=repair.REQUEST_PERMISSION),
        AdminPage("<int:repair_id>/approve/", repair_approve_view, name="reconciliation_repair_approve",
                  title="Approve a repair", permission=repair.APPROVE_PERMISSION, listed=False),
    ]

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        if not term:
            return queryset, False
        return queryset.filter(params__videos__contains=[term]), False

    def has_approve_permission(self, request) -> bool:
        return request.user.has_perm(repair.APPROVE_PERMISSION)

    @admin.action(description="Approve the selected repair requests", permissions=["approve"])
    def approve(self, request, queryset):
        for pk in queryset.order_by("pk").values_list("pk", flat=True):
            _approve(request, pk)

    @admin.display(description="videos")
    def videos_text(self, req: RepairRequest) -> str:
        if _restored_snapshot(req) is not None and not req.video_ids:
            return "all (a restore replaces the whole projection)"
        return f"{len(req.video_ids)}: {_videos_text(req.video_ids)}"

    @admin.display(description="source")
    def source(self, req: RepairRequest) -> str:
        snapshot_id = _restored_snapshot(req)
        if snapshot_id is None:
            return req.params.get("source", "")
        return format_html('<a href="{}" class="repair-snapshot">{}</a>',
                           _url("reconciliation_recoverysnapshot_change", snapshot_id), req.params["source"])

    @admin.display(description="parameters (approved by hash)")
    def params_json(self, req: RepairRequest) -> str:
        return _json(req.params, "repair-params")

    @admin.display(description="before / after")
    def before_after(self, req: RepairRequest) -> str:
        if not req.before and not req.after:
            return "not run yet"
        if _restored_snapshot(req) is not None:
            return _totals_before_after(req)
        layers = ("facts", "projection", "buckets", "display")
        rows = []
        for video in sorted(set(req.before) | set(req.after)):
            before, after = req.before.get(video, {}), req.after.get(video, {})
            rows += [(video, layer, before.get(layer, "-"), after.get(layer, "-")) for layer in layers]
        body = format_html_join("", '<tr class="repair-layer"><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>', rows)
        return format_html('<table class="repair-before-after"><thead><tr><th>video</th><th>layer</th><th>before</th>'
                           "<th>after</th></tr></thead><tbody>{}</tbody></table>", body)

    @admin.display(description="before (raw)")
    def before_json(self, req: RepairRequest) -> str:
        return _json(req.before, "repair-before")

    @admin.display(description="after (raw)")
    def after_json(self, req: RepairRequest) -> str:
        return _json(req.after, "repair-after")

    @admin.display(description="watermarks before")
    def watermarks_before_json(self, req: RepairRequest) -> str:
        return _json(req.watermarks_before, "repair-watermarks-before")

    @admin.display(description="watermarks after")
    def watermarks_after_json(self, req: RepairRequest) -> str:
        return _json(req.watermarks_after, "repair-watermarks-after")

    @admin.display(description="result")
    def result_json(self, req: RepairRequest) -> str:
        return _json(req.result, "repair-result")

    @admin.display(description="ops job")
    def job_link(self, req: RepairRequest) -> str:
        return _link("opsjobs_opsjob_change", req.job_id)

    @admin.display(description="verify run")
    def verify_link(self, req: RepairRequest) -> str:
        return _link("reconciliation_checkrun_change", req.verify_run_id)

    @admin.display(description="diffs")
    def diffs_link(self, req: RepairRequest) -> str:
        ids = list(CheckDiff.objects.filter(repair_id=req.pk).order_by("id").values_list("id", flat=True))
        if not ids:
            return "none"
        url = _url("reconciliation_checkdiff_changelist", query={"repair_id": req.pk})
        return format_html('<a href="{}">{} diff(s): {}</a>', url, len(ids), _videos_text([str(i) for i in ids]))

    @admin.display(description="audit")
    def audit_link(self, req: RepairRequest) -> str:
        return _audit_link("repair", req.pk)



# --- recovery snapshots (issue 12) -----------------------------------------------------------------


@require_http_methods(["GET", "POST"])
def snapshot_take_view(request, *, admin_site):
    """The form that starts the snapshot job (the job's page follows it)."""
    return job_form_page(
        request, admin_site, form_class=SnapshotTakeForm, permission=SNAPSHOT_PERMISSION, title="Take a snapshot",
        submit="Take the snapshot",
        intro="Takes a recovery snapshot of the whole count projection, as an ops job on the workers: dispatch on "
              "every count partition stops for a moment while the exact cut of the event log is read (its length "
              "is recorded), then both tables of every partition are dumped from that cut, read back and checked. "
              "It is SEALED only if every check holds; otherwise FAILED, with the reason.",
        start=lambda data: (SNAPSHOT_JOB, {"reason": data["reason"]}, ""),
    )


def _snapshot_url(snapshot_id) -> str:
    return _url("reconciliation_recoverysnapshot_change", snapshot_id)


def _snapshot_job(request, admin_site, snapshot_id, *, kind: str):
    """Start `kind` (verify, test-restore) for one snapshot: the job's page, or the refusal as a message."""
    try:
        snap = snapshot_get(snapshot_id)
    except DomainError as exc:
        messages.error(request, exc.message)
        return HttpResponseRedirect(_url("reconciliation_recoverysnapshot_changelist"))
    response = start_job_or_message(request, admin_site, kind=kind, params={"snapshotId": snap.pk},
                                    target=f"snapshot {snap.pk}")
    return response or HttpResponseRedirect(_snapshot_url(snap.pk))


@require_POST
def snapshot_verify_view(request, snapshot_id: int, *, admin_site):
    """The Verify button of a snapshot's page (POST only): starts the verification job."""
    require_permission(request, SNAPSHOT_PERMISSION)
    return _snapshot_job(request, admin_site, snapshot_id, kind=SNAPSHOT_VERIFY_JOB)


@require_POST
def snapshot_test_restore_view(request, snapshot_id: int, *, admin_site):
    """The Test-restore button of a snapshot's page (POST only): starts the drill's job."""
    require_permission(request, SNAPSHOT_PERMISSION)
    return _snapshot_job(request, admin_site, snapshot_id, kind=SNAPSHOT_TEST_JOB)


def _table(css: str, headers: tuple[str, ...], rows) -> str:
    head = format_html_join("", "<th>{}</th>", ((h,) for h in headers))
    body = format_html_join("", f'<tr class="{css}-row">' + "<td>{}</td>" * len(headers) + "</tr>", rows)
    return format_html('<table class="{}"><thead><tr>{}</tr></thead><tbody>{}</tbody></table>', css, head, body)


def _artifact_rows(snap: RecoverySnapshot, kind: str) -> int:
    return sum(int(a.get("rows") or 0) for a in snap.artifacts if a.get("kind") == kind)


@admin.register(RecoverySnapshot)
class RecoverySnapshotAdmin(StatusAdmin):
    """Recovery snapshots (issue 12): the cut (the whole offset vector), the artifacts with their checksums,
    how long dispatch was paused, the last test-restore's verdict, and the jobs and audit records."""

    list_display = ("id", "status_code", "generation", "created_at", "dispatch_pause", "rows_text", "test_verdict",
                    "started_by", "reason")
    list_filter = ("status",)
    search_fields = ("=id", "=started_by", "reason")
    ordering = ("-id",)
    fields = ("status_code", "reason", "started_by", "channel", "generation", "bucket_space_version", "manifest_id",
              "stream_contract_version", "offsets_table", "artifacts_table", "dispatch_pause", "timings_json",
              "failure", "dead_letters_at_cut", "test_verdict", "tested_at", "test_result_json", "jobs_table",
              "audit_link", "created_at", "sealed_at", "finished_at")
    readonly_fields = ("status_code", "offsets_table", "artifacts_table", "dispatch_pause", "timings_json",
                       "test_verdict", "test_result_json", "jobs_table", "audit_link")
    actions = ["verify", "test_restore"]
    change_list_template = "reconciliation/admin/recoverysnapshot_change_list.html"
    change_form_template = "reconciliation/admin/recoverysnapshot_change_form.html"
    pages = [
        AdminPage("take/", snapshot_take_view, name="reconciliation_snapshot_take", title="Take a snapshot",
                  permission=SNAPSHOT_PERMISSION),
        AdminPage("<int:snapshot_id>/verify/", snapshot_verify_view, name="reconciliation_snapshot_verify",
                  title="Verify a snapshot", permission=SNAPSHOT_PERMISSION, listed=False),
        AdminPage("<int:snapshot_id>/test-restore/", snapshot_test_restore_view,
                  name="reconciliation_snapshot_test_restore", title="Test-restore a snapshot",
                  permission=SNAPSHOT_PERMISSION, listed=False),
    ]

    def has_snapshot_permission(self, request) -> bool:
        return request.user.has_perm(SNAPSHOT_PERMISSION)

    def _one_job(self, request, queryset, *, kind: str):
        # One job per snapshot, each followed on its own page: an action starts one.
        if queryset.count() != 1:
            self.message_user(request, "Select exactly one snapshot: each one is verified or test-restored by its "
                                       "own job, shown on its page.", messages.ERROR)
            return None
        return _snapshot_job(request, self.admin_site, queryset.get().pk, kind=kind)

    @admin.action(description="Verify the selected snapshot (a job)", permissions=["snapshot"])
    def verify(self, request, queryset):
        return self._one_job(request, queryset, kind=SNAPSHOT_VERIFY_JOB)

    @admin.action(description="Test-restore the selected snapshot into a scratch generation (a job)",
                  permissions=["snapshot"])
    def test_restore(self, request, queryset):
        return self._one_job(request, queryset, kind=SNAPSHOT_TEST_JOB)

    @admin.display(description="dispatch paused", ordering="dispatch_paused_ms")
    def dispatch_pause(self, snap: RecoverySnapshot) -> str:
        return "-" if snap.dispatch_paused_ms is None else f"{snap.dispatch_paused_ms:.1f} ms"

    @admin.display(description="rows")
    def rows_text(self, snap: RecoverySnapshot) -> str:
        if not snap.artifacts:
            return "-"
        return f"{_artifact_rows(snap, 'projection')} relations, {_artifact_rows(snap, 'vbuckets')} buckets"

    @admin.display(description="test-restore")
    def test_verdict(self, snap: RecoverySnapshot) -> str:
        if not snap.test_result:
            return "never"
        ok = snap.test_result.get("ok")
        return format_html('<span class="test-verdict">{}</span>', "ok" if ok else "FAILED")

    @admin.display(description="offset vector")
    def offsets_table(self, snap: RecoverySnapshot) -> str:
        if not snap.offsets:
            return "none (no cut was recorded)"
        return _table("snapshot-offsets", ("topic", "partition", "through (in the snapshot)",
                                           "nextOffset (the replay starts here)", "stream entries added at the cut"),
                      ((o.get("topic", ""), o.get("partition"), o.get("through"), o.get("nextOffset"),
                        o.get("streamAdded", "-")) for o in snap.offsets))

    @admin.display(description="artifacts")
    def artifacts_table(self, snap: RecoverySnapshot) -> str:
        if not snap.artifacts:
            return "none"
        return _table("snapshot-artifacts", ("kind", "partition", "uri", "rows", "sha256", "bytes"),
                      ((a.get("kind"), a.get("partition"), a.get("uri"), a.get("rows"), a.get("sha256"),
                        a.get("bytes")) for a in snap.artifacts))

    @admin.display(description="timings (ms)")
    def timings_json(self, snap: RecoverySnapshot) -> str:
        return _json(snap.timings, "snapshot-timings") if snap.timings else "-"

    @admin.display(description="last test-restore")
    def test_result_json(self, snap: RecoverySnapshot) -> str:
        return _json(snap.test_result, "snapshot-test-result") if snap.test_result else "never"

    @admin.display(description="ops jobs")
    def jobs_table(self, snap: RecoverySnapshot) -> str:
        jobs = OpsJob.objects.filter(pk=snap.job_id) | OpsJob.objects.filter(
            kind__in=[SNAPSHOT_VERIFY_JOB, SNAPSHOT_TEST_JOB], params__snapshotId=snap.pk)
        shown = list(jobs.order_by("id")[:20])
        if not shown:
            return "-"
        return _table("snapshot-jobs", ("job", "kind", "status", "by", "message"),
                      ((_link("opsjobs_opsjob_change", j.pk), j.kind, j.status, j.actor, j.message) for j in shown))

    @admin.display(description="audit")
    def audit_link(self, snap: RecoverySnapshot) -> str:
        return _audit_link("recovery_snapshot", snap.pk)


@admin.register(AutoRepairSwitch)
class AutoRepairSwitchAdmin(RuntimeSwitchAdmin):
    """The auto-repair pause (issue 14 §3): while set, check runs record count-cache diffs without fixing them."""
