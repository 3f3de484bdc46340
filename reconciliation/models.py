"""Reconciliation runs, reports and repair tasks arrive with the reconciliation issue."""
