"""Teams: who may read a job's log lines (its owner, its team, operators)."""
