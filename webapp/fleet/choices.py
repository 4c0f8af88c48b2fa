from django.db import models


class NodeState(models.TextChoices):
    REGISTERED = "registered", "Registered (never seen)"
    UP = "up", "Up"
    STALE = "stale", "Stale (not reporting)"
    DRAINING = "draining", "Draining"
    DRAINED = "drained", "Drained"
    DOWN = "down", "Down"


# What the scheduler says of a node that takes no new jobs (collectors/schema.NODE_STATES):
# telemetry never turns these back to up, only the scheduler reporting the node up does.
SCHEDULER_OUT_OF_SERVICE = (NodeState.DRAINING, NodeState.DRAINED, NodeState.DOWN)
