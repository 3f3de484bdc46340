"""The WSGI application of the web tier (`gunicorn … likes_project.wsgi:application`, the Procfile's `web`).

Two Django handlers share one URLconf: the API paths (`likes_project.middleware.API_PREFIXES`) go through
`settings.API_MIDDLEWARE`, everything else (the console, the admin, static files) through `settings.MIDDLEWARE`
(issue 34 §1, D136). Each handler keeps its own middleware lists, so neither request ever runs the other's hooks.
`API_LEAN_MIDDLEWARE=false` serves every path through the full chain."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "likes_project.settings.production")

import django
from django.conf import settings
from django.core.handlers.wsgi import WSGIHandler

from likes_project.middleware import API_PREFIXES


class ApiHandler(WSGIHandler):
    """A WSGIHandler whose chain is `settings.API_MIDDLEWARE`."""

    def load_middleware(self, is_async: bool = False) -> None:
        full = settings.MIDDLEWARE
        settings.MIDDLEWARE = settings.API_MIDDLEWARE  # read by BaseHandler.load_middleware, once, at startup
        try:
            super().load_middleware(is_async)
        finally:
            settings.MIDDLEWARE = full


class PathDispatch:
    """Send each request to the API's handler or to the full one, by the path's prefix."""

    def __init__(self, full: WSGIHandler, api: WSGIHandler) -> None:
        self.full, self.api = full, api

    def __call__(self, environ, start_response):
        handler = self.api if environ.get("PATH_INFO", "").startswith(API_PREFIXES) else self.full
        return handler(environ, start_response)


def application_build():
    django.setup(set_prefix=False)
    full = WSGIHandler()
    return PathDispatch(full, ApiHandler()) if settings.API_LEAN_MIDDLEWARE else full


application = application_build()
