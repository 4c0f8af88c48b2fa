"""The admin names every model in plain English: no "Rejected batchs" or "deliverys" made by
adding an s, and its models' options match their migrations."""

from __future__ import annotations

import io
import re

from django.contrib import admin
from django.core.management import call_command

# An English plural never ends in a consonant + "ys" or in ch/sh/x/s + "s": those are a
# singular with an "s" stuck on.
NAIVE_PLURAL = re.compile(r"([^aeiou]ys|chs|shs|xs|sss)$")


def test_no_admin_model_is_pluralized_by_adding_an_s():
    naive = sorted(
        f"{m._meta.app_label}.{m.__name__}: {m._meta.verbose_name_plural}"
        for m in admin.site._registry
        if NAIVE_PLURAL.search(str(m._meta.verbose_name_plural))
    )
    assert naive == []


def test_the_refusal_log_reads_refused_batches(admin_client):
    page = admin_client.get("/admin/").content.decode()
    assert "Refused batches" in page and "batchs" not in page


def test_core_models_match_their_migrations(db):
    call_command("makemigrations", "core", "--check", "--dry-run", stdout=io.StringIO())


def test_evaluation_models_match_their_migrations(db):
    call_command("makemigrations", "evaluation", "--check", "--dry-run", stdout=io.StringIO())
