"""The middleware chains: `MIDDLEWARE` for every path, `API_MIDDLEWARE` for the API's (`likes_project/wsgi.py`)."""

MIDDLEWARE = [
    "likes_project.logs.RequestContextMiddleware",  # first: a fresh log context and X-Request-ID (issue 10)
    "likes_project.middleware.HttpProtocolMiddleware",  # body size, chunked bodies, HEAD
    "likes_project.http_metrics.HttpMetricsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "likes_project.middleware.JsonErrorMiddleware",
]
# The API's own chain (issue 34 §1, D136): the paths of `likes_project.middleware.API_PREFIXES` are served by a
# second handler with only what an API answer needs. Left out: WhiteNoise (no static file lives under them),
# CommonMiddleware (APPEND_SLASH is off, no PREPEND_WWW), CSRF (DRF's views are exempt and its session
# authentication checks the token itself), messages (no API answer shows one) and X-Frame-Options (a JSON body is
# not framed). Sessions and auth stay: the API accepts a console session (SessionAuthentication).
API_MIDDLEWARE = [m for m in MIDDLEWARE if m not in (
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
)]
