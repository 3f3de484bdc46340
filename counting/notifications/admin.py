"""Creator notifications in the console, read-only: each (author, video, window) with its count and whether
the author read it. The windows are written by the `notify` consumer alone; nothing here changes them.
Likers are shown as ids (usernames and privacy are the API's, applied when read)."""

from __future__ import annotations

from django.contrib import admin

from counting.notifications.models import NotifyWindow
from likes_project.admin_kit import ReadOnlyAdmin


@admin.register(NotifyWindow)
class NotifyWindowAdmin(ReadOnlyAdmin):
    list_display = ("video_id", "author_id", "window_start", "window_end", "new_likes", "read", "last_added_at",
                    "updated_at")
    search_fields = ("video_id", "=author_id")
    ordering = ("-window_end", "-id")
    fields = ("author_id", "video_id", "window_start", "window_end", "new_likes", "read", "read_at",
              "last_added_at", "liker_ids", "created_at", "updated_at")
    readonly_fields = ("read", "liker_ids")
    show_full_result_count = False

    @admin.display(boolean=True, description="read?")
    def read(self, obj: NotifyWindow) -> bool:
        return obj.is_read

    @admin.display(description="likers (newest first, ids)")
    def liker_ids(self, obj: NotifyWindow) -> str:
        ids = list(obj.likers.order_by("-liked_at", "-user_id").values_list("user_id", flat=True)[:101])
        return ", ".join(map(str, ids[:100])) + (" ..." if len(ids) > 100 else "")
