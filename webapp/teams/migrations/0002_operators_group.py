"""The `operators` group (webapp/teams/selectors.py OPERATORS_GROUP at the time of writing):
its members read every job's log lines. Created empty; sites add people in the admin.

The name is copied here rather than imported, so this migration keeps meaning what it meant
when the code changes.
"""

from django.db import migrations

OPERATORS_GROUP = "operators"


def add_group(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    Group.objects.get_or_create(name=OPERATORS_GROUP)


def remove_group(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    Group.objects.filter(name=OPERATORS_GROUP, user__isnull=True).delete()


class Migration(migrations.Migration):
    dependencies = [("teams", "0001_initial"), ("auth", "0012_alter_user_first_name_max_length")]

    operations = [migrations.RunPython(add_group, remove_group)]
