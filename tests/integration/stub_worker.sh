#!/bin/sh
# A stand-in for ddpbench-worker in test_schemathesis: lives 2 s (so runs are seen
# queued, running and ended, and cancel meets both) and reports nothing, so every run
# fails without using a core. The contract, not the workload, is under test there.
exec sleep 2
