"""Node signing keys out of plain sight: before, `token_hash` held sha256(token), the very key
a node signs its batches with. Each such key is sealed under the server's secret
(VIGIL_NODE_KEY_SECRET) into `signing_key_sealed`, and `token_hash` becomes an HMAC of it, as
webapp/fleet/services.py writes them: nodes keep their tokens. The key stays in backups taken
before; the README says to issue tokens again where one may have leaked. The algorithms are
copied here so that later changes to the services do not change what this migration did."""

import hashlib
import hmac
import re
import secrets

from django.conf import settings
from django.db import migrations, models

_HEX64 = re.compile(r"[0-9a-f]{64}")


def _hmac(data: bytes) -> bytes:
    return hmac.new(settings.VIGIL_NODE_KEY_SECRET.encode(), data, hashlib.sha256).digest()


def seal_legacy_keys(apps, schema_editor) -> None:
    node_model = apps.get_model("fleet", "Node")
    for node in node_model.objects.filter(signing_key_sealed="").only("id", "token_hash"):
        key = node.token_hash
        if not _HEX64.fullmatch(key):  # never a node key: it cannot sign in as anything
            continue
        salt = secrets.token_bytes(16)
        pad = _hmac(b"vigil-node-key\0" + salt)
        body = bytes(a ^ b for a, b in zip(bytes.fromhex(key), pad, strict=True))
        node_model.objects.filter(pk=node.pk).update(
            signing_key_sealed=f"v1:{salt.hex()}:{body.hex()}",
            token_hash=_hmac(b"vigil-node-token\0" + key.encode()).hex(),
        )


def unseal_keys(apps, schema_editor) -> None:
    node_model = apps.get_model("fleet", "Node")
    for node in node_model.objects.exclude(signing_key_sealed="").only("id", "signing_key_sealed"):
        _, salt, body = node.signing_key_sealed.split(":")
        pad = _hmac(b"vigil-node-key\0" + bytes.fromhex(salt))
        key = bytes(a ^ b for a, b in zip(bytes.fromhex(body), pad, strict=True)).hex()
        node_model.objects.filter(pk=node.pk).update(token_hash=key, signing_key_sealed="")


class Migration(migrations.Migration):
    dependencies = [("fleet", "0004_node_last_contact_at")]

    operations = [
        migrations.AddField(
            model_name="node",
            name="signing_key_sealed",
            field=models.CharField(blank=True, default="", max_length=128),
        ),
        migrations.AlterField(
            model_name="node",
            name="token_hash",
            field=models.CharField(db_index=True, max_length=64),
        ),
        migrations.RunPython(seal_legacy_keys, unseal_keys),
    ]
