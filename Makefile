# toolgate: the two commands a fresh machine needs are `make run` and `make test`.
CARGO ?= cargo
CONFIG ?= .
LISTEN ?= 127.0.0.1:8080

.PHONY: run test check lint fmt bench demo schema clean

## run: serve the shipped configuration on $(LISTEN)
run:
	$(CARGO) run -p gateway --bin toolgate -- serve --config $(CONFIG) --listen $(LISTEN)

## test: format check, lints, and every test of the workspace
test: lint
	$(CARGO) build --workspace --all-targets
	@if $(CARGO) nextest --version >/dev/null 2>&1; then \
		$(CARGO) nextest run --workspace --no-fail-fast; \
	else \
		$(CARGO) test --workspace --no-fail-fast; \
	fi

## lint: rustfmt and clippy, warnings are errors
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## check: validate the shipped configuration
check:
	$(CARGO) run -q -p gateway --bin toolgate -- check --config $(CONFIG)

fmt:
	$(CARGO) fmt --all

## bench: benchmarks, in release mode (run nothing else meanwhile)
bench:
	$(CARGO) run --release -p toolgate-tests --bin bench-catalog

## schema: write the JSON Schema of the configuration formats to docs/schema.json
schema:
	$(CARGO) run -q -p gateway --bin toolgate -- schema > docs/schema.json

## demo: a few requests against a running `make run`
demo:
	curl -s http://$(LISTEN)/healthz; echo
	curl -s http://$(LISTEN)/v1/tool-sets; echo
	curl -s "http://$(LISTEN)/v1/tools?tool_set=default"; echo

clean:
	$(CARGO) clean
