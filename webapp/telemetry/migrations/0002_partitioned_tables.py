"""Partitioned sample tables (Django cannot create partitioned tables, so this is SQL).

Written out in full so the migration stays frozen; tests/telemetry/test_models.py checks that
the columns match collectors.schema. No foreign keys on the hot tables: a FK check per row
would dominate COPY, and GPUs and nodes are never deleted while samples of them are kept.
Partitions (one per day) are made by telemetry.partitions, not here.
"""

from django.db import migrations

CREATE = """
CREATE TABLE telemetry_gpusample (
    gpu_id bigint NOT NULL,
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
    pstate bigint,
    PRIMARY KEY (gpu_id, ts)
) PARTITION BY RANGE (ts);

CREATE TABLE telemetry_nodesample (
    node_id bigint NOT NULL,
    ts timestamptz NOT NULL,
    cpu_util real,
    mem_util real,
    net_rx_bytes_s real,
    net_tx_bytes_s real,
    ib_rx_bytes_s real,
    ib_tx_bytes_s real,
    server_power_w real,
    gpu_count bigint,
    PRIMARY KEY (node_id, ts)
) PARTITION BY RANGE (ts);

CREATE TABLE telemetry_gpurollup1m (
    gpu_id bigint NOT NULL,
    minute timestamptz NOT NULL,
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
    PRIMARY KEY (gpu_id, minute)
) PARTITION BY RANGE (minute);
"""

DROP = """
DROP TABLE IF EXISTS telemetry_gpurollup1m;
DROP TABLE IF EXISTS telemetry_nodesample;
DROP TABLE IF EXISTS telemetry_gpusample;
"""


class Migration(migrations.Migration):
    dependencies = [("telemetry", "0001_initial")]

    operations = [migrations.RunSQL(CREATE, DROP)]
