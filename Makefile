.PHONY: install test lint bench

install:
	python3 -m venv .venv && .venv/bin/pip install -e '.[dev]'

test:
	.venv/bin/pytest -q

lint:
	.venv/bin/ruff check .
	.venv/bin/ruff format --check agora_cli migrations
	.venv/bin/mypy

bench:
	for b in tests/bench/bench_*.py; do echo "== $$b"; .venv/bin/python $$b; done
