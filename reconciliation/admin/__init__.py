"""Admin for reconciliation (issue 11; OPS-4, OPS-7, OPS-8; issue 12): check runs, their diffs, repair
requests and recovery snapshots, all read-only tables. The only writes are the console's forms, buttons and
actions, each through its service, which checks the workflow and writes the audit record; a refused step is
an error message or a form error, never a 500.

One module a concern: `checks` (start a check), `diffs` (triage, request a repair of diffs), `repairs`
(request and approve a repair, a restore included; the auto-repair switch), `snapshots` (take, verify,
test-restore); `common` holds what they share, and the HTML of their tables is in
`reconciliation/templates/reconciliation/admin/`. Importing this package (Django's admin autodiscover does)
registers them all; their public names stay importable from here.
"""

from reconciliation.admin.checks import DIFFS_SHOWN, CheckRunAdmin
from reconciliation.admin.common import StatusAdmin
from reconciliation.admin.diffs import CheckDiffAdmin, DiffTransitionAdmin
from reconciliation.admin.repairs import (
    AutoRepairSwitchAdmin,
    RepairRequestAdmin,
    repair_approve_view,
    repair_request_view,
)
from reconciliation.admin.snapshots import (
    RecoverySnapshotAdmin,
    snapshot_test_restore_view,
    snapshot_verify_view,
)

__all__ = [
    "DIFFS_SHOWN",
    "AutoRepairSwitchAdmin",
    "CheckDiffAdmin",
    "CheckRunAdmin",
    "DiffTransitionAdmin",
    "RecoverySnapshotAdmin",
    "RepairRequestAdmin",
    "StatusAdmin",
    "repair_approve_view",
    "repair_request_view",
    "snapshot_test_restore_view",
    "snapshot_verify_view",
]
