#!/usr/bin/env bash
# Periodic maintenance for an agora database, e.g. from cron every 5 minutes:
#   */5 * * * *  AGORA_DATABASE_URL=postgresql://agora@db/app /opt/agora/examples/cron-maintenance.sh
# Each step is bounded, safe to run from several hosts at once, and prints one JSON document;
# a failing step stops the script with its exit code (3 = database unreachable).
set -euo pipefail
AGORA=${AGORA:-agora}

# Stream frames past their replay window (one hour after a run's last write).
"$AGORA" frames purge --ttl 3600 --batch 100 --json
# Pending proposals past expires_at, a bounded batch per run.
"$AGORA" proposals expire --limit 1000 --json
# Costs a runtime that prices on read left NULL (the upstream runtime does), stored as estimates
# from the current prices, so that `agora quota --all` (your alert) counts them; the last two
# UTC days (a bounded range of the created_at index).
"$AGORA" prices reprice --last 2d --json
# Proposals written by older writers, brought into the discovery index in bounded batches.
"$AGORA" db backfill --limit 500 --max-batches 20 --json
