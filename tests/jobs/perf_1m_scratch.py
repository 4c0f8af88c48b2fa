import time

import pytest
from django.db import connection

from webapp.fleet.models import Cluster
from webapp.jobs.characterization import Window, jobs_characterize, _STATS_SQL, _HIST_SQL, LOG2_EDGES

FILL = """
INSERT INTO jobs_job (cluster_id, scheduler_id, name, "user", team, partition, qos, comment,
  job_type, job_type_explicit, state, source, submit_at, start_at, end_at, gpus_requested, nodes_requested,
  cpus_requested, updated_at)
SELECT %s, i::text, 'job' || i, 'u' || (i %% 500), 't' || (i %% 20), '', '', '',
  (ARRAY['eval','eval','eval','eval','eval','eval','sft','other','debug','pretrain','mllm'])[1 + (i %% 11)], true,
  (ARRAY['completed','completed','failed','failed','cancelled','timeout','preempted','running','node_fail','completed'])[1 + (i*7 %% 10)],
  'simulated',
  ts, ts + (random()*100) * interval '1 second',
  CASE WHEN i*7 %% 10 = 7 THEN NULL ELSE ts + (random()*100 + exp(random()*10)) * interval '1 second' END,
  (ARRAY[0,1,1,1,2,4,8,8,16,64,1024])[1 + (i*13 %% 11)], 1, 16, now()
FROM (SELECT i, timestamptz '2025-01-01' + i * interval '15 seconds' AS ts FROM generate_series(1, 1000000) i) x
"""


@pytest.mark.django_db
def test_perf():
    c = Cluster.objects.create(name="big")
    other = Cluster.objects.create(name="other")
    with connection.cursor() as cur:
        t = time.perf_counter()
        cur.execute(FILL, [c.id])
        cur.execute(FILL, [other.id])
        print("fill", time.perf_counter() - t)
        cur.execute("ANALYZE jobs_job")
        cur.execute("SHOW work_mem"); print("work_mem", cur.fetchone())
    w = Window(c)
    for _ in range(3):
        t = time.perf_counter()
        r = jobs_characterize(w)
        print("characterize", time.perf_counter() - t)
    print(r.total, r.summary)
    where, params = w.where()
    with connection.cursor() as cur:
        for sql, p in ((_STATS_SQL.format(where=where), params), (_HIST_SQL.format(where=where), [list(LOG2_EDGES)]*2 + params)):
            cur.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, p)
            print("\n".join(r[0] for r in cur.fetchall()))
