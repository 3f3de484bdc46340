"""Reading settings from the environment (architecture §9): the helpers every settings module uses."""

from __future__ import annotations

import os


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return raw.strip().lower() in {"1", "true", "yes", "on"}


def env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, str(default)))


def env_float(name: str, default: float) -> float:
    return float(os.environ.get(name, str(default)))


def env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def file_storage(backend: str, *, env_prefix: str, s3_location: str, directory: str, overwrite: bool) -> dict:
    """A STORAGES entry: an S3-compatible bucket through django-storages when `backend` is "s3" (its bucket,
    endpoint and key prefix from `<env_prefix>_S3_BUCKET`, `_S3_ENDPOINT_URL`, `_S3_PREFIX`), else a private
    directory (files 0600, directories 0700)."""
    if backend == "s3":
        return {"BACKEND": "storages.backends.s3.S3Storage", "OPTIONS": {
            "bucket_name": os.environ.get(f"{env_prefix}_S3_BUCKET", ""),
            "endpoint_url": os.environ.get(f"{env_prefix}_S3_ENDPOINT_URL") or None,
            "location": os.environ.get(f"{env_prefix}_S3_PREFIX", s3_location),
            "file_overwrite": overwrite, "default_acl": None}}
    return {"BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": directory, "file_permissions_mode": 0o600, "directory_permissions_mode": 0o700}}
