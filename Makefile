.PHONY: install test test-fast lint format bench

install:
	python3 -m venv .venv && .venv/bin/pip install -e '.[dev]'

# The README's test command: all three dialects (a server that does not answer is skipped,
# unless AGORA_TEST_REQUIRE lists it, as .ci/run does).
test:
	.venv/bin/pytest -q -n 2

# The inner loop: SQLite only, no multi-process or subprocess tests, two workers (< 30 s).
test-fast:
	AGORA_TEST_DIALECTS=sqlite .venv/bin/pytest -q -m "not slow" -n 2

lint:
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/mypy

format:
	.venv/bin/ruff check --fix .
	.venv/bin/ruff format .

bench:
	for b in tests/bench/bench_*.py; do echo "== $$b"; .venv/bin/python $$b; done
