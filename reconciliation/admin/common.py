"""What the reconciliation admins share: links to admin pages (`admin_kit.admin_url`) and the read-only fields
that show them, the audit link, the status column, a long list in a line, and the tables their pages show
(`reconciliation/admin/table.html`)."""

from __future__ import annotations

from django.contrib import admin
from django.template.loader import render_to_string
from django.utils.html import format_html
from django.utils.safestring import SafeString

from likes_project.admin_kit import ReadOnlyAdmin, admin_url

TABLE_TEMPLATE = "reconciliation/admin/table.html"


def link(name: str, pk, text=None) -> str:
    if pk is None:
        return "-"
    return format_html('<a href="{}">{}</a>', admin_url(name, pk), pk if text is None else text)


def audit_records_link(target_type: str, target_id) -> str:
    url = admin_url("audit_auditrecord_changelist", query={"target_type": target_type, "target_id": target_id})
    return format_html('<a href="{}">the audit records of {} {}</a>', url, target_type.replace("_", " "), target_id)


def link_field(name: str, attr: str, description: str, *, ordering: str | None = None):
    """A ModelAdmin's read-only field linking the object's `attr` (an id) to the admin page `name`."""

    @admin.display(description=description, ordering=ordering)
    def field(self, obj) -> str:
        return link(name, getattr(obj, attr))

    return field


def audit_field(target_type: str):
    """A ModelAdmin's read-only field linking to the audit records of the object (a `target_type`)."""

    @admin.display(description="audit")
    def field(self, obj) -> str:
        return audit_records_link(target_type, obj.pk)

    return field


def shortened(text: str, limit: int) -> SafeString:
    """`text` cut to `limit` characters with an ellipsis, the whole of it in the cell's title (shown on hover)."""
    text = text or ""
    if len(text) <= limit:
        return format_html("{}", text)
    return format_html('<span title="{}">{}…</span>', text, text[:limit - 1])


def list_text(items: list[str], shown: int = 5) -> str:
    """The first `shown` items, and how many more."""
    more = len(items) - shown
    return ", ".join(items[:shown]) + (f" (+{more} more)" if more > 0 else "")


def table(css: str, headers: tuple[str, ...], rows, *, row_css: str = "", template: str = TABLE_TEMPLATE,
          **extra) -> str:
    """A table of `headers` and `rows` (a cell built by format_html stays markup, any other is escaped); its
    class is `css`, each row's `row_css` (`<css>-row` unless named). `template` may extend the table (a link
    after it), with `extra` in its context."""
    return render_to_string(template, {"css": css, "row_css": row_css or f"{css}-row", "headers": headers,
                                       "rows": list(rows), **extra})


class StatusAdmin(ReadOnlyAdmin):
    """Read-only, with the status shown as the CLI, the API and the messages spell it (SUCCEEDED,
    FIXING), not as its label ("Succeeded"): operators compare them."""

    @admin.display(description="status", ordering="status")
    def status_code(self, obj) -> str:
        return format_html('<span class="status-code">{}</span>', obj.status)
