"""Moved to `likes_project.leases` (issue 29 §3); this old name is that same module object, so a patch
through either name reaches both. It stays only until the modules being changed in other branches of
work import the new name (likes_project/generations/engine.py, reconciliation/services/recovery/
{bucket_space,restore,snapshot}.py, tests/reconciliation/test_snapshots.py); then it is deleted. No
migration imports it."""

import sys

from likes_project import leases

sys.modules[__name__] = leases
