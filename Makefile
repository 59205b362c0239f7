.PHONY: install test test-fast test-pg test-mysql test-pooled lint format bench clusters-up clusters-down

# Bytecode caching on, whatever the shell says: with PYTHONDONTWRITEBYTECODE set, every pytest
# process (the controller and each worker) compiles agora_cli and every test module afresh and
# rewrites their asserts again, about 4 s of CPU a process.
unexport PYTHONDONTWRITEBYTECODE

install:
	python3 -m venv .venv && .venv/bin/pip install -e '.[dev]'

# The README's test command: all three dialects (a server that does not answer is skipped,
# unless AGORA_TEST_REQUIRE lists it, as .ci/run does).
test:
	.venv/bin/pytest -q -n 2

# The inner loop: SQLite only (its files on /dev/shm, see tests/conftest.py), no servers, no
# multi-process, subprocess or wall-clock tests (`slow`), a tenth of each Hypothesis test's
# examples (the `fast` profile), two workers. About 35-50 s on a 2-core machine (CONTRIBUTING.md).
test-fast:
	AGORA_TEST_DIALECTS=sqlite .venv/bin/pytest -q -m "not slow" -n 2 --hypothesis-profile=fast

# One server dialect: every test that takes a database (the `db` marker, slow ones included),
# on that dialect only; the server must answer (AGORA_TEST_REQUIRE turns a skip into a failure).
test-pg:
	AGORA_TEST_DIALECTS=postgresql AGORA_TEST_REQUIRE=postgresql .venv/bin/pytest -q -m db -n 2

test-mysql:
	AGORA_TEST_DIALECTS=mysql AGORA_TEST_REQUIRE=mysql .venv/bin/pytest -q -m db -n 2

# The proposals, ledger, RLS and provisioning tests on PostgreSQL through a pooler: the
# transaction-mode PgBouncer of tests/pgbouncer/pooler.py unless AGORA_TEST_PG_POOLER_URL names
# another (.ci/run runs this in transaction mode and once in session mode).
POOLED_TESTS = tests/store/test_provision.py tests/store/test_ledger.py tests/store/test_rls.py \
	tests/store/test_rls_attacks.py tests/store/test_proposals.py tests/store/test_proposals_batch.py \
	tests/store/test_proposals_concurrency.py tests/cli/test_rls_cli.py
test-pooled:
	AGORA_TEST_DIALECTS=postgresql \
	AGORA_TEST_PG_POOLER_URL=$${AGORA_TEST_PG_POOLER_URL:-postgresql://postgres@127.0.0.1:6432/postgres} \
	.venv/bin/pytest -q -n 2 $(POOLED_TESTS)

# The Galera cluster, the two PgBouncers and the Patroni cluster, by hand: each `up` prints the
# value of its AGORA_TEST_GALERA / AGORA_TEST_PGBOUNCER / AGORA_TEST_PATRONI (see .ci/run).
clusters-up:
	.venv/bin/python tests/galera/cluster.py up
	.venv/bin/python tests/pgbouncer/pooler.py up
	.venv/bin/python tests/patroni/cluster.py up

clusters-down:
	-.venv/bin/python tests/patroni/cluster.py down
	-.venv/bin/python tests/pgbouncer/pooler.py down
	-.venv/bin/python tests/galera/cluster.py down

lint:
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/mypy

format:
	.venv/bin/ruff check --fix .
	.venv/bin/ruff format .

bench:
	for b in tests/bench/bench_*.py; do echo "== $$b"; .venv/bin/python $$b; done
