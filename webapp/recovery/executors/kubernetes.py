"""Kubernetes: cordon and annotate a node, delete a pod so its controller restarts it.

A Kubernetes job's scheduler id is `namespace/pod` (`pod` alone means the `default`
namespace). There is no health check or resubmission here: those actions fail with the
reason, and an operator takes over. No cluster runs where tests run: the command lines are
what is tested.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from django.conf import settings

from webapp.recovery.executors.base import (
    CommandResult,
    Executor,
    Target,
    UnsupportedAction,
    command_run,
)

# kubectl's wording when the API server cannot be reached or is overloaded.
TRANSIENT = re.compile(
    r"Unable to connect to the server|i/o timeout|TLS handshake timeout|connection refused|"
    r"the server is currently unable to handle the request|etcdserver: request timed out|"
    r"Too many requests",
    re.IGNORECASE,
)


# Kubernetes object names (https://kubernetes.io/docs/concepts/overview/working-with-objects/
# names/): a namespace is a DNS label (RFC 1123), a pod or node name a DNS subdomain.
DNS_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?")
DNS_SUBDOMAIN = re.compile(
    r"(?=.{1,253}$)[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*"
)


def _name(value: str, pattern: re.Pattern, what: str) -> str:
    if not pattern.fullmatch(value):
        raise UnsupportedAction(f"{what} {value!r} is not a Kubernetes name (RFC 1123)")
    return value


def pod_of(job: str) -> tuple[str, str]:
    """(namespace, pod) of a job's scheduler id, both checked against Kubernetes' name rules."""
    namespace, sep, pod = job.partition("/")
    if not sep:
        namespace, pod = "default", job
    return _name(namespace, DNS_LABEL, "namespace"), _name(pod, DNS_SUBDOMAIN, "pod")


def node_of(host: str) -> str:
    return _name(host, DNS_SUBDOMAIN, "node")


class KubernetesExecutor(Executor):
    kind = "kubernetes"

    def kubectl(self, *args: str) -> list[str]:
        return [settings.VIGIL_KUBECTL, *args]

    def _drain(self, t: Target) -> list[list[str]]:
        notes = [f"vigil.io/action={t.action_id}"]
        if t.failure_id is not None:
            notes += [f"vigil.io/failure={t.failure_id}", f"vigil.io/cause={t.cause}"]
        node = node_of(t.host)
        # `--`: whatever follows is a name or an annotation, never an option.
        return [
            self.kubectl("cordon", "--", node),
            self.kubectl("annotate", "--overwrite", "--", "node", node, *notes),
        ]

    def _resume(self, t: Target) -> list[list[str]]:
        node = node_of(t.host)
        return [
            self.kubectl("uncordon", "--", node),
            self.kubectl(
                "annotate", "--", "node", node, "vigil.io/action-", "vigil.io/failure-",
                "vigil.io/cause-",
            ),
        ]  # fmt: skip

    def _requeue(self, t: Target) -> list[list[str]]:
        namespace, pod = pod_of(t.job)
        return [self.kubectl("delete", "pod", "--namespace", namespace, "--wait=false", "--", pod)]

    def transient(self, result: CommandResult) -> bool:
        return result.returncode == 124 or bool(TRANSIENT.search(result.stderr))

    def done(self, argv: Sequence[str], target: Target, before: dict) -> bool:
        if target.kind == "requeue":
            namespace, pod = pod_of(target.job)
            got = command_run(self.kubectl("get", "pod", "--namespace", namespace, "--", pod))
            return "NotFound" in got.stderr
        # cordon / annotate / uncordon are idempotent: running them again is harmless.
        return False
