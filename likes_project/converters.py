"""URL converters. `anyseg` takes any non-empty text (newlines and `/` included) so that a malformed
video id reaches the view and gets 400 `invalid_video_id`, instead of silently not routing (404)."""

from django.urls import register_converter


class AnySegmentConverter:
    regex = r"[\s\S]+?"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(AnySegmentConverter, "anyseg")
