"""Reference data shipped with Vigil: the Acme paper's cluster summary and telemetry CDFs.

`cluster_summary.csv` is a verbatim copy of AcmeTrace's `data/cluster_summary.csv`;
`reference_cdfs.json` is built from the project's `acmetrace/derived/util_cdf_long.csv` by
`reference.py` (run `python -m webapp.jobs.data.reference` to regenerate it). Source: GitHub
InternLM/AcmeTrace at 6d6ac9c, CC BY 4.0 (Hu et al., NSDI '24).
"""
