from django.db import migrations


class Migration(migrations.Migration):
    """The admin's names of the refusal log: "Refused batches", not "Rejected batchs"."""

    dependencies = [("core", "0002_rejected_batch_pruned")]

    operations = [
        migrations.AlterModelOptions(
            name="rejectedbatch",
            options={
                "ordering": ["-received_at"],
                "verbose_name": "refused batch",
                "verbose_name_plural": "refused batches",
            },
        ),
        migrations.AlterModelOptions(
            name="rejectedbatchpruned",
            options={
                "verbose_name": "pruned refusals count",
                "verbose_name_plural": "pruned refusals counts",
            },
        ),
    ]
