"""The latest sample of each GPU, one row per GPU, kept by ingest.

SQL, written out in full so the migration stays frozen: the columns have the sample table's
types (real, not Django's double precision), so the latest values read exactly as the stored
samples do. fillfactor 50 leaves room in each page for the new version of a row, so the
update of every GPU's row every interval is a HOT update that touches no index (PostgreSQL
docs, "Heap-Only Tuples"); the table holds one row per GPU, so the space is small. Existing
samples fill it once, from the newest row of each GPU.
"""

import django.db.models.deletion
from django.db import migrations, models

CREATE = """
CREATE TABLE telemetry_gpulatest (
    gpu_id bigint PRIMARY KEY REFERENCES fleet_gpu (id) ON DELETE CASCADE
        DEFERRABLE INITIALLY DEFERRED,
    ts timestamptz NOT NULL,
    gpu_util real,
    mem_copy_util real,
    sm_active real,
    sm_occupancy real,
    tensor_active real,
    dram_active real,
    fb_used_bytes bigint,
    fb_total_bytes bigint,
    power_w real,
    power_limit_w real,
    energy_mj bigint,
    gpu_temp_c real,
    mem_temp_c real,
    sm_clock_mhz real,
    mem_clock_mhz real,
    clocks_event_reasons bigint,
    ecc_sbe_vol bigint,
    ecc_dbe_vol bigint,
    ecc_sbe_agg bigint,
    ecc_dbe_agg bigint,
    remap_corr bigint,
    remap_unc bigint,
    remap_pending bigint,
    remap_failure bigint,
    nvlink_crc_flit bigint,
    nvlink_crc_data bigint,
    nvlink_replay bigint,
    nvlink_recovery bigint,
    pcie_tx_bytes_s real,
    pcie_rx_bytes_s real,
    pcie_replay bigint,
    pcie_gen bigint,
    pcie_width bigint,
    pstate bigint
) WITH (fillfactor = 50);

INSERT INTO telemetry_gpulatest
SELECT DISTINCT ON (gpu_id) s.*
FROM telemetry_gpusample s
JOIN fleet_gpu g ON g.id = s.gpu_id
ORDER BY gpu_id, ts DESC;
"""


STATE = [
        migrations.CreateModel(
            name='GpuLatest',
            fields=[
                ('gpu', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='+', serialize=False, to='fleet.gpu')),
                ('ts', models.DateTimeField()),
                ('gpu_util', models.FloatField(null=True)),
                ('mem_copy_util', models.FloatField(null=True)),
                ('sm_active', models.FloatField(null=True)),
                ('sm_occupancy', models.FloatField(null=True)),
                ('tensor_active', models.FloatField(null=True)),
                ('dram_active', models.FloatField(null=True)),
                ('fb_used_bytes', models.BigIntegerField(null=True)),
                ('fb_total_bytes', models.BigIntegerField(null=True)),
                ('power_w', models.FloatField(null=True)),
                ('power_limit_w', models.FloatField(null=True)),
                ('energy_mj', models.BigIntegerField(null=True)),
                ('gpu_temp_c', models.FloatField(null=True)),
                ('mem_temp_c', models.FloatField(null=True)),
                ('sm_clock_mhz', models.FloatField(null=True)),
                ('mem_clock_mhz', models.FloatField(null=True)),
                ('clocks_event_reasons', models.BigIntegerField(null=True)),
                ('ecc_sbe_vol', models.BigIntegerField(null=True)),
                ('ecc_dbe_vol', models.BigIntegerField(null=True)),
                ('ecc_sbe_agg', models.BigIntegerField(null=True)),
                ('ecc_dbe_agg', models.BigIntegerField(null=True)),
                ('remap_corr', models.BigIntegerField(null=True)),
                ('remap_unc', models.BigIntegerField(null=True)),
                ('remap_pending', models.BigIntegerField(null=True)),
                ('remap_failure', models.BigIntegerField(null=True)),
                ('nvlink_crc_flit', models.BigIntegerField(null=True)),
                ('nvlink_crc_data', models.BigIntegerField(null=True)),
                ('nvlink_replay', models.BigIntegerField(null=True)),
                ('nvlink_recovery', models.BigIntegerField(null=True)),
                ('pcie_tx_bytes_s', models.FloatField(null=True)),
                ('pcie_rx_bytes_s', models.FloatField(null=True)),
                ('pcie_replay', models.BigIntegerField(null=True)),
                ('pcie_gen', models.BigIntegerField(null=True)),
                ('pcie_width', models.BigIntegerField(null=True)),
                ('pstate', models.BigIntegerField(null=True)),
            ],
            options={
                'db_table': 'telemetry_gpulatest',
            },
        ),
]


class Migration(migrations.Migration):

    dependencies = [
        ('fleet', '0003_node_state_reason_since'),
        ('telemetry', '0004_rejectedbatch_to_core'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunSQL(CREATE, "DROP TABLE telemetry_gpulatest")],
            state_operations=STATE,
        ),
    ]
