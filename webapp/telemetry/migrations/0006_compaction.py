"""Compacted GPU samples and the hourly rollup, as SQL: Django cannot make
partitioned tables. Written out in full so the migration stays frozen.

telemetry_gpusamplepacked holds one row per GPU and hour (webapp/telemetry/packing.py):
`hot` (timestamps, energy and power, about a tenth of the bytes: it stays in the row) and
`data` (the other fields), both already Zstandard-compressed, so their storage is EXTERNAL
(never compressed again by TOAST, whose pglz would spend CPU to gain nothing). Partitions (by day
for packed samples, by month for the hourly rollup) are made by telemetry.partitions.
"""

import django.contrib.postgres.fields
from django.db import migrations, models


CREATE = """
CREATE TABLE telemetry_gpusamplepacked (
    gpu_id bigint NOT NULL,
    hour timestamptz NOT NULL,
    n integer NOT NULL,
    first_ts timestamptz NOT NULL,
    last_ts timestamptz NOT NULL,
    hot bytea NOT NULL,
    data bytea NOT NULL,
    PRIMARY KEY (gpu_id, hour)
) PARTITION BY RANGE (hour);
ALTER TABLE telemetry_gpusamplepacked ALTER COLUMN hot SET STORAGE EXTERNAL;
ALTER TABLE telemetry_gpusamplepacked ALTER COLUMN data SET STORAGE EXTERNAL;

CREATE TABLE telemetry_gpurollup1h (
    gpu_id bigint NOT NULL,
    hour timestamptz NOT NULL,
    n integer NOT NULL,
    energy_mj_min bigint,
    energy_mj_max bigint,
    gpu_util_min real,
    gpu_util_max real,
    gpu_util_sum double precision,
    gpu_util_cnt integer NOT NULL DEFAULT 0,
    mem_copy_util_min real,
    mem_copy_util_max real,
    mem_copy_util_sum double precision,
    mem_copy_util_cnt integer NOT NULL DEFAULT 0,
    sm_active_min real,
    sm_active_max real,
    sm_active_sum double precision,
    sm_active_cnt integer NOT NULL DEFAULT 0,
    tensor_active_min real,
    tensor_active_max real,
    tensor_active_sum double precision,
    tensor_active_cnt integer NOT NULL DEFAULT 0,
    fb_used_bytes_min real,
    fb_used_bytes_max real,
    fb_used_bytes_sum double precision,
    fb_used_bytes_cnt integer NOT NULL DEFAULT 0,
    power_w_min real,
    power_w_max real,
    power_w_sum double precision,
    power_w_cnt integer NOT NULL DEFAULT 0,
    gpu_temp_c_min real,
    gpu_temp_c_max real,
    gpu_temp_c_sum double precision,
    gpu_temp_c_cnt integer NOT NULL DEFAULT 0,
    sm_clock_mhz_min real,
    sm_clock_mhz_max real,
    sm_clock_mhz_sum double precision,
    sm_clock_mhz_cnt integer NOT NULL DEFAULT 0,
    PRIMARY KEY (gpu_id, hour)
) PARTITION BY RANGE (hour);
"""

DROP = """
DROP TABLE IF EXISTS telemetry_gpurollup1h;
DROP TABLE IF EXISTS telemetry_gpusamplepacked;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("telemetry", "0005_gpu_latest"),
    ]

    operations = [
        migrations.RunSQL(CREATE, DROP),
        migrations.CreateModel(
            name="GpuRollup1h",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "gpu_id",
                        "hour",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("hour", models.DateTimeField()),
                ("n", models.IntegerField()),
                ("energy_mj_min", models.BigIntegerField(null=True)),
                ("energy_mj_max", models.BigIntegerField(null=True)),
                ("gpu_util_min", models.FloatField(null=True)),
                ("gpu_util_max", models.FloatField(null=True)),
                ("gpu_util_sum", models.FloatField(null=True)),
                ("gpu_util_cnt", models.IntegerField(default=0)),
                ("mem_copy_util_min", models.FloatField(null=True)),
                ("mem_copy_util_max", models.FloatField(null=True)),
                ("mem_copy_util_sum", models.FloatField(null=True)),
                ("mem_copy_util_cnt", models.IntegerField(default=0)),
                ("sm_active_min", models.FloatField(null=True)),
                ("sm_active_max", models.FloatField(null=True)),
                ("sm_active_sum", models.FloatField(null=True)),
                ("sm_active_cnt", models.IntegerField(default=0)),
                ("tensor_active_min", models.FloatField(null=True)),
                ("tensor_active_max", models.FloatField(null=True)),
                ("tensor_active_sum", models.FloatField(null=True)),
                ("tensor_active_cnt", models.IntegerField(default=0)),
                ("fb_used_bytes_min", models.FloatField(null=True)),
                ("fb_used_bytes_max", models.FloatField(null=True)),
                ("fb_used_bytes_sum", models.FloatField(null=True)),
                ("fb_used_bytes_cnt", models.IntegerField(default=0)),
                ("power_w_min", models.FloatField(null=True)),
                ("power_w_max", models.FloatField(null=True)),
                ("power_w_sum", models.FloatField(null=True)),
                ("power_w_cnt", models.IntegerField(default=0)),
                ("gpu_temp_c_min", models.FloatField(null=True)),
                ("gpu_temp_c_max", models.FloatField(null=True)),
                ("gpu_temp_c_sum", models.FloatField(null=True)),
                ("gpu_temp_c_cnt", models.IntegerField(default=0)),
                ("sm_clock_mhz_min", models.FloatField(null=True)),
                ("sm_clock_mhz_max", models.FloatField(null=True)),
                ("sm_clock_mhz_sum", models.FloatField(null=True)),
                ("sm_clock_mhz_cnt", models.IntegerField(default=0)),
            ],
            options={
                "db_table": "telemetry_gpurollup1h",
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="GpuSamplePacked",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "gpu_id",
                        "hour",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("hour", models.DateTimeField()),
                ("n", models.IntegerField()),
                ("first_ts", models.DateTimeField()),
                ("last_ts", models.DateTimeField()),
                ("hot", models.BinaryField()),
                ("data", models.BinaryField()),
            ],
            options={
                "db_table": "telemetry_gpusamplepacked",
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="CompactDirty",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "gpu_ids",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.BigIntegerField(), size=None
                    ),
                ),
                ("lo", models.DateTimeField()),
                ("hi", models.DateTimeField()),
                ("created_at", models.DateTimeField(auto_now_add=True)),
            ],
        ),
        migrations.CreateModel(
            name="CompactionState",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("hour", models.DateTimeField()),
                ("gpu_after", models.BigIntegerField(default=0)),
                ("updated_at", models.DateTimeField(auto_now=True)),
            ],
        ),
        migrations.CreateModel(
            name="Rollup1hDirty",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "gpu_ids",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.BigIntegerField(), size=None
                    ),
                ),
                ("lo", models.DateTimeField()),
                ("hi", models.DateTimeField()),
                ("created_at", models.DateTimeField(auto_now_add=True)),
            ],
        ),
    ]
