"""Recovery: act on every diagnosis through the scheduler, audited (policy, executors, pages)."""
