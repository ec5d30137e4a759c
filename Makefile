.PHONY: docs up down test test-unit build release bench bench-peer bench-instructions microbench lint soak drills drill-upgrade

## Start the whole pipeline on embedded defaults (dev broker, Redis, fakes, 4 services, demo realm).
up:
	scripts/dev-up.sh

## Stop it.
down:
	scripts/dev-down.sh

## Run every test (installs what is missing, builds, starts its own Redis/broker/fakes).
test:
	scripts/test.sh

## Unit tests only: no sockets, no child processes (stages on in-memory seams, models,
## crypto, the consumer's state machine, error mapping); under a minute after the build.
UNIT_TESTS = ^(PushModelsTests|PushCryptoTests|StatusPushTests|StageTests)\.|^KafkaTests\.(ConsumerStateMachineTests|OffsetTrackerTests)|^ProvidersTests\.(AdaptiveRateTests|ErrorMappingTests|RecordedReasonTests|RetryAfterTests)|^FuzzTests\.JSONReaderFuzzTests
test-unit:
	swift build --build-tests && swift test --skip-build --filter '$(UNIT_TESTS)'

build:
	swift build

## Cut a release: `make release VERSION=x.y.z` checks the tree, writes the version everywhere,
## moves CHANGELOG.md's [Unreleased] under it, commits and tags vx.y.z (scripts/release.sh).
release:
	scripts/release.sh "$(VERSION)"

## Formatting per .swift-format (CI runs it before the tests); `scripts/lint.sh --fix` rewrites.
lint:
	scripts/lint.sh

## End-to-end benchmark: 500/s, flat out, then 2,000/s, 60 s each (see docs/performance.md).
bench:
	scripts/bench.sh

## CPU per APNs push on one APNs fake: the relay's dispatcher vs aioapns vs a Go sender (NO_BUILD=1: no build;
## RATE=0: unpaced, PUSHES pushes each as fast as the fake answers, the relay fed notifications of 100 devices).
bench-peer:
	scripts/bench-peer.sh

## Instructions (callgrind Ir) per notification per stage; `scripts/bench-instructions.sh dispatcher` for one.
bench-instructions:
	scripts/bench-instructions.sh

## Soak: a steady rate for SOAK_MINUTES (30) at SOAK_RATE (500/s); each minute's p99 and RSS, and whether they grow.
soak:
	scripts/soak.sh

## The fault drills at full length (broker outage 50 s, provider brownout 60 s, slow provider 60 s); `make test` runs them short.
drills:
	scripts/install-deps.sh && swift build --build-tests && PUSHRELAY_DRILL_SCALE=10 PUSHRELAY_BIN_DIR="$$(swift build --show-bin-path)" swift test --skip-build --filter DrillTests

## Rolling upgrade from the previous release (FROM=<tag or commit>) to HEAD under 200/s, both orders; `make test` runs it short, HEAD to HEAD.
drill-upgrade:
	scripts/drill-upgrade.sh

## Micro benchmarks of the hot paths (crypto, envelopes, provider bodies, APNs JWT).
microbench:
	swift build -c release --product microbench && "$$(swift build -c release --show-bin-path)/microbench" --columns name,median,min,iterations

## docs/configuration.md from the settings catalog (a test fails when they differ).
docs:
	swift build --product pushrelay && "$$(swift build --show-bin-path)/pushrelay" settings > docs/configuration.md
