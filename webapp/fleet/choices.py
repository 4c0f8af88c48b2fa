from django.db import models


class NodeState(models.TextChoices):
    REGISTERED = "registered", "Registered (never seen)"
    UP = "up", "Up"
    STALE = "stale", "Stale (not reporting)"
    DRAINING = "draining", "Draining"
    DOWN = "down", "Down"
