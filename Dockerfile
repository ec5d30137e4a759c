# PushRelay images; each container runs one executable.
#
#   docker build -t pushrelay:latest .                      # production (the last stage, the default)
#   docker build --target dev -t pushrelay-dev:latest .     # dev and operator tools
#
# production: ingest, encryptor, dispatcher, feedback and the operator's tool, pushrelay
#             (the operator tool: servers and realms by hand, `topics create`/`topics wait`,
#             which the Kubernetes topics Job and the stages' init containers run), nothing else.
# dev:        devbroker (librdkafka's mock cluster) and provider-fakes (APNs/FCM fakes);
#             compose's dev profile runs its services from it.
# Needs BuildKit (the default builder since Docker 23): it builds only the stages the
# requested target depends on, so a production build never compiles the dev stages.

# Sources and toolchain. SwiftPM loads the manifest only when every target directory
# named in Package.swift exists, so all of them are copied (Dev included) even though
# the production build compiles none of the dev targets.
FROM swift:6.2-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends librdkafka-dev libhiredis-dev libsodium-dev libssl-dev libsecp256k1-dev pkg-config \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Package.resolved is optional (it is not committed): when present, the image gets the
# same dependency versions as the local build.
COPY Package.swift Package.resolve[d] ./
COPY Shared Shared
COPY Services Services
COPY Dev Dev
COPY Tools Tools
COPY Tests Tests
COPY benchmarks benchmarks
# Only the production products: their dependency graph does not include FakeProviders,
# DevStack, KafkaDev or any other Dev/ target, so none of them is compiled here.
# (RUN uses /bin/sh, dash on Debian: no brace expansion, so each binary is named.)
RUN swift build -c release --static-swift-stdlib \
    --product ingest --product encryptor --product dispatcher --product feedback \
    --product pushrelay \
    && bin="$(swift build -c release --show-bin-path)" && mkdir /out \
    && cp "$bin/ingest" "$bin/encryptor" "$bin/dispatcher" "$bin/feedback" "$bin/pushrelay" /out/

# Dev tools, built on top of the production build (shared modules are reused, not
# rebuilt). pushrelay depends on no Dev/ target: it is in the production build above.
FROM build AS build-dev
RUN swift build -c release --static-swift-stdlib \
    --product devbroker --product provider-fakes \
    && bin="$(swift build -c release --show-bin-path)" && mkdir /out-dev \
    && cp "$bin/devbroker" "$bin/provider-fakes" /out-dev/

# What both runtime images share: the C libraries, CA certificates and a non-root user.
# USER is numeric (uid:gid 10001:10001, the user and group `relay`), so Kubernetes can
# verify runAsNonRoot without resolving a name; deploy/base sets runAsUser/runAsGroup to
# the same numbers.
FROM debian:bookworm-slim AS runtime
RUN apt-get update && apt-get install -y --no-install-recommends librdkafka1 libhiredis0.14 libsodium23 libssl3 libsecp256k1-1 ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 relay && useradd --system --uid 10001 --gid 10001 relay
USER 10001:10001
ENV PUSHRELAY_HTTP_HOST=0.0.0.0

# Dev tools (compose's dev profile): devbroker, provider-fakes.
FROM runtime AS dev
# The fakes write their CA and credentials to /fakes (compose mounts a named volume
# there, which takes this directory's owner when first created).
USER root
RUN install -d -o 10001 -g 10001 /fakes
USER 10001:10001
COPY --from=build-dev /out-dev/ /usr/local/bin/

# Production: the four services, the replay tool and the admin tool only. Keep this stage
# last, so a plain `docker build` produces it.
FROM runtime AS production
# The release (VERSION; scripts/release.sh keeps this default equal to it) and the commit:
#   docker build --build-arg REVISION="$(git rev-parse HEAD)" -t pushrelay:"$(cat VERSION)" .
# The revision reaches `--version`, /health and pushrelay_build_info through the environment.
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="PushRelay" \
      org.opencontainers.image.description="End-to-end-encrypted mobile push relay: ingest, encryptor, dispatcher, feedback" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
ENV PUSHRELAY_BUILD_REVISION=${REVISION}
COPY --from=build /out/ /usr/local/bin/
