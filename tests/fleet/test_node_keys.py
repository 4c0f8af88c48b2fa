"""What PostgreSQL keeps of a node's token cannot sign for the node: the key is derived with a
server-side secret, kept out of the admin, and tokens issued before keep working."""

from __future__ import annotations

import hashlib
import hmac
import importlib
import json

import pytest
from django.apps import apps as django_apps
from django.contrib.auth import get_user_model

from collectors.schema import SIGNATURE_PREFIX, batch_sign, node_key, parse_batch
from tests.helpers import make_batch
from webapp.core.refusals import AuthError
from webapp.fleet.models import Node
from webapp.fleet.services import caches_clear, node_authenticate, node_token_issue

pytestmark = pytest.mark.django_db


def _signed_with(key: str, batch: dict) -> str:
    """The batch signed with `key` as the HMAC key, as a forger would sign it."""
    body = json.dumps({k: v for k, v in batch.items() if k != "token"}, separators=(",", ":"))
    mac = hmac.new(key.encode(), body.encode(), hashlib.sha256).hexdigest()
    return f"{SIGNATURE_PREFIX}{mac}\n{body}"


def _stored_columns(node: Node) -> list[str]:
    """Every text column of the node's row, as a reader of a backup or replica sees them."""
    row = Node.objects.filter(pk=node.pk).values().get()
    return [v for v in row.values() if isinstance(v, str) and len(v) >= 32]


def test_nothing_stored_in_fleet_node_signs_a_batch_the_workers_accept():
    token = node_token_issue("seren", "gpu-a-001")
    node = Node.objects.get(hostname="gpu-a-001")
    batch = make_batch("seren", "gpu-a-001", token, intervals=1)
    good = parse_batch(batch_sign(json.dumps(batch)))
    assert node_authenticate("seren", "gpu-a-001", good.credential).id == node.pk

    stored = _stored_columns(node)
    assert stored  # the row keeps something of the token
    assert node_key(token) not in json.dumps(stored)  # not the node's signing key
    for value in stored:
        for key in (value, value.split(":")[-1]):
            forged = parse_batch(_signed_with(key, batch))
            with pytest.raises(AuthError) as exc:
                node_authenticate("seren", "gpu-a-001", forged.credential)
            assert exc.value.reason == "bad_signature"


def test_the_admin_shows_no_key_of_the_node(client):
    node_token_issue("seren", "gpu-a-001")
    node = Node.objects.get(hostname="gpu-a-001")
    admin = get_user_model().objects.create_superuser("root", password="correct-horse-battery")
    client.force_login(admin)
    page = client.get(f"/admin/fleet/node/{node.pk}/change/").content.decode()
    assert "gpu-a-001" in page
    for value in _stored_columns(node):
        assert value not in page


def test_a_token_issued_before_keeps_working_and_its_key_leaves_the_table():
    """A row as the previous release wrote it: token_hash held sha256(token), the key itself.
    The migration seals it; the node signs as before and needs no new token."""
    token = "f" * 64
    node_token_issue("seren", "gpu-a-001")
    Node.objects.filter(hostname="gpu-a-001").update(
        token_hash=node_key(token), signing_key_sealed=""
    )
    migration = importlib.import_module("webapp.fleet.migrations.0005_node_signing_key_sealed")
    migration.seal_legacy_keys(django_apps, None)
    caches_clear()

    node = Node.objects.get(hostname="gpu-a-001")
    assert node_key(token) not in json.dumps(_stored_columns(node))
    batch = make_batch("seren", "gpu-a-001", token, intervals=1)
    signed = parse_batch(batch_sign(json.dumps(batch)))
    assert node_authenticate("seren", "gpu-a-001", signed.credential).id == node.pk
    assert node_authenticate("seren", "gpu-a-001", token).id == node.pk  # the HTTP API's bearer


def test_a_bearer_token_is_found_through_an_index():
    """The HTTP API finds a node by its token alone (node_authenticate_bearer): by an index on
    token_hash, not by reading every node of every cluster."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            "SELECT indexdef FROM pg_indexes WHERE tablename = 'fleet_node' "
            "AND indexdef LIKE '%%(token_hash%%'"
        )
        assert cur.fetchall()
