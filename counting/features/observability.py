"""The feature export's gauge (registered with `likes_project.observability`): the end of the newest period it
wrote, so an alert fires when the hourly files stop coming (`time() - value` past FILE_S + grace + beat period)."""

from __future__ import annotations

from likes_project.observability import Scrape, register_part


def _newest(scrape: Scrape) -> None:
    from counting.features.selectors import feature_export_newest

    end = feature_export_newest()
    scrape.family("likes_feature_export_newest_period_end_seconds",
                  "Epoch seconds at which the newest exported period ends (0: no file kept).").add(
        end.timestamp() if end else 0.0)


def register() -> None:
    register_part("feature_export", _newest)
