# One image with all PushRelay executables; each container runs one of them.
FROM swift:6.2-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends librdkafka-dev libhiredis-dev libsodium-dev pkg-config \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Package.swift ./
COPY Shared Shared
COPY Services Services
COPY Tools Tools
COPY Tests Tests
RUN swift build -c release --static-swift-stdlib \
    --product ingest --product encryptor --product dispatcher --product feedback \
    --product devbroker --product provider-fakes \
    && mkdir /out && cp "$(swift build -c release --show-bin-path)"/{ingest,encryptor,dispatcher,feedback,devbroker,provider-fakes} /out/

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends librdkafka1 libhiredis0.14 libsodium23 ca-certificates \
    && rm -rf /var/lib/apt/lists/* && useradd --system --uid 10001 relay
COPY --from=build /out/ /usr/local/bin/
USER relay
ENV PUSHRELAY_HTTP_HOST=0.0.0.0
