.PHONY: up down test build

## Start the whole pipeline on embedded defaults (dev broker, Redis, fakes, 4 services, demo realm).
up:
	scripts/dev-up.sh

## Stop it.
down:
	scripts/dev-down.sh

## Run every test (installs what is missing, builds, starts its own Redis/broker/fakes).
test:
	scripts/test.sh

build:
	swift build
