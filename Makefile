.PHONY: install test test-fast test-pg test-mysql lint format bench

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

lint:
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/mypy

format:
	.venv/bin/ruff check --fix .
	.venv/bin/ruff format .

bench:
	for b in tests/bench/bench_*.py; do echo "== $$b"; .venv/bin/python $$b; done
