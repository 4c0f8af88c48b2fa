#!/bin/sh
# The tests' node health check: deploy/healthcheck's line protocol, with the verdict of each
# node of the allocation set by the test (a node named in the file "$1" fails).
for node in $(scontrol show hostnames "$SLURM_JOB_NODELIST"); do
  if grep -qx "$node" "$1"; then
    echo "VIGIL-HEALTH $node FAIL injected by the test"
  else
    echo "VIGIL-HEALTH $node PASS"
  fi
done
# What the check's job was given: a test reads that none of Vigil's settings reached it.
env | sed 's/^/ENV /'
