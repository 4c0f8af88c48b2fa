"""Inventory: clusters, nodes and their GPUs."""

from django.db import models

from webapp.fleet.choices import NodeState


class Cluster(models.Model):
    name = models.SlugField(max_length=64, unique=True)
    # Grid zone for carbon intensity (an Electricity Maps / WattTime style zone name).
    grid_zone = models.CharField(max_length=64, blank=True, default="")
    # PUE default: Uptime Institute Global Data Center Survey 2023, 1.58 (docs/energy-carbon.md).
    pue = models.FloatField(default=1.58)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Node(models.Model):
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="nodes")
    hostname = models.CharField(max_length=128)
    state = models.CharField(max_length=16, choices=NodeState.choices, default=NodeState.REGISTERED)
    last_seen = models.DateTimeField(null=True, blank=True)
    # When a batch of the node last arrived, whatever time its samples carry: a node replaying
    # history or a spool is talking to us though its newest sample is old (node-down alerts).
    last_contact_at = models.DateTimeField(null=True, blank=True)
    # As the scheduler's watcher last reported it (draining, drained, down with the reason
    # the scheduler gives, e.g. Slurm's `sinfo -R`), and since when.
    state_reason = models.CharField(max_length=256, blank=True, default="")
    state_since = models.DateTimeField(null=True, blank=True)
    # The token itself is shown once, when issued. What is kept of it signs nothing without
    # the server's secret (webapp/fleet/services.py): an HMAC of the node's signing key, which
    # finds a bearer token (indexed), and the signing key sealed. Secret all the same: kept
    # out of the admin.
    token_hash = models.CharField(max_length=64, db_index=True)
    signing_key_sealed = models.CharField(max_length=128, blank=True, default="")
    token_issued_at = models.DateTimeField(null=True, blank=True)
    source = models.CharField(max_length=16, blank=True, default="")
    # The scheduler role: job events (which job holds which GPUs of any node of the cluster)
    # are accepted from this node's token. Granted explicitly, to the host that runs the
    # cluster's scheduler watcher or to an integration's entry (`issue_node_token
    # --scheduler`); a GPU node's token alone can only speak for its own node.
    may_send_job_events = models.BooleanField(
        default=False, help_text="Scheduler role: accept job events signed by this node."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["cluster__name", "hostname"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "hostname"], name="node_unique_hostname")
        ]

    def __str__(self) -> str:
        return f"{self.cluster.name}/{self.hostname}"


class Gpu(models.Model):
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    uuid = models.CharField(max_length=96, unique=True)
    model = models.CharField(max_length=96, blank=True, default="")
    memory_total_bytes = models.BigIntegerField(null=True, blank=True)
    pci_bus_id = models.CharField(max_length=32, blank=True, default="")
    serial = models.CharField(max_length=64, blank=True, default="")
    # The device's minor number (/dev/nvidiaN), which a Slurm GRES index names; `index` is
    # NVML's, and the two orders can differ (webapp/jobs/services.py matches by this first).
    minor_number = models.PositiveSmallIntegerField(null=True, blank=True)
    first_seen = models.DateTimeField(auto_now_add=True)
    last_seen = models.DateTimeField(null=True, blank=True)
    # An operator moved the hardware: the next node of the cluster to report this GPU takes it
    # over, even while its present node still reports (webapp/fleet/services.gpus_register).
    released = models.BooleanField(
        default=False, help_text="Moved by an operator: the next node reporting it takes it."
    )

    class Meta:
        ordering = ["node_id", "index"]
        indexes = [models.Index(fields=["node", "index"], name="gpu_node_index")]
        verbose_name = "GPU"
        verbose_name_plural = "GPUs"

    def __str__(self) -> str:
        return f"{self.node.hostname}:{self.index}"
