"""Failure diagnosis: the label set (taxonomy), the rule catalogue (rules.yaml) and the engine
(diagnosis) that turns a failed job's logs into one cause, action and blamed node."""
