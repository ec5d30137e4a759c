import Logging

/// The settings of every service: brokers, Redis, topics, listeners and key files, in the order docs/configuration.md lists them
/// (`make docs` writes that file from these tables).
extension SettingsCatalog {
    static let kafka = Section(
        "Kafka",
        "The brokers, and how the clients reach them (TLS, SASL, more librdkafka settings).",
        [
            Setting("pushrelay.kafka.brokers", .text, default: "required (or the file below)", "all"),
            Setting(
                "pushrelay.kafka.brokers.file", .path, default: "unset",
                "all: a file holding the brokers (written by `devbroker`)"),
            Setting(
                "pushrelay.kafka.properties", .secret, default: "unset",
                """
                all: more librdkafka settings for every client, `name=value` pairs separated by `;` (e.g. \
                `security.protocol=SASL_SSL;sasl.mechanism=SCRAM-SHA-512`); the settings delivery rests on \
                (`acks`, `enable.idempotence`, `enable.auto.commit`, `group.id`, …) are refused
                """),
            Setting(
                "pushrelay.kafka.properties.file", .path, default: "unset",
                "all: the same as a file, a pair a line (`#` comments): for secrets such as `sasl.password`"),
            Setting(
                "pushrelay.kafka.producer.properties", .secret, default: "unset",
                "all: librdkafka settings for producers only, after the shared ones (e.g. `linger.ms=20`)"),
            Setting(
                "pushrelay.kafka.consumer.properties", .secret, default: "unset",
                "all: librdkafka settings for consumers only (e.g. `fetch.wait.max.ms=100`)"),
            Setting(
                "pushrelay.kafka.security.protocol", .oneOf(["plaintext", "ssl", "sasl_plaintext", "sasl_ssl"]),
                default: "`plaintext` (librdkafka's)",
                "all: `plaintext`, `ssl`, `sasl_plaintext` or `sasl_ssl` (`security.protocol`)"),
            Setting(
                "pushrelay.kafka.sasl.mechanism", .oneOf(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]), default: "unset",
                "`PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512` (`sasl.mechanisms`); required with `sasl_*`"),
            Setting(
                "pushrelay.kafka.sasl.username", .text, default: "unset",
                "`sasl.username`; required with `sasl_*`"),
            Setting(
                "pushrelay.kafka.sasl.password.file", .path, default: "unset",
                "a file whose first line is `sasl.password`; required with `sasl_*`"),
            Setting(
                "pushrelay.kafka.tls.ca.file", .path, default: "the system's trust store",
                "`ssl.ca.location`, with `ssl` or `sasl_ssl`"),
            Setting(
                "pushrelay.kafka.tls.cert.file", .path, default: "unset",
                "`ssl.certificate.location`: a client certificate for mutual TLS (with the key)"),
            Setting("pushrelay.kafka.tls.key.file", .path, default: "unset", "`ssl.key.location`"),
            Setting(
                "pushrelay.kafka.tls.verify", .bool, default: "`true`",
                """
                `false`: no certificate or host name checks (`enable.ssl.certificate.verification`, \
                `ssl.endpoint.identification.algorithm=none`); otherwise the broker's name is checked \
                (`https`)
                """),
        ])

    static let redis = Section(
        "Redis",
        "Where device state lives: one server or a Cluster, with ACL users and TLS.",
        [
            Setting("pushrelay.redis.host", .text, default: "`127.0.0.1`", "ingest, encryptor, dispatcher, feedback"),
            Setting("pushrelay.redis.port", .int(1...65535), default: "`6379`", ""),
            Setting(
                "pushrelay.redis.connections", .int(1...256), default: "one per event loop (`PUSHRELAY_EVENT_LOOPS`)",
                """
                pool size: a loop's commands of one turn share one write (4 on one loop cost Redis 12–16 % \
                more: benchmarks/history/20-issue-27-part-4-fakes-and-system-calls.md)
                """),
            Setting(
                "pushrelay.redis.timeout.ms", .int(1...600_000), default: "`2000`",
                """
                connect timeout, and a command's wait for its reply from when it is written (a command queued \
                behind a connect may so wait up to twice this)
                """),
            Setting("pushrelay.redis.prefix", .topic, default: "`pr:`", "key prefix"),
            Setting(
                "pushrelay.redis.cluster", .bool, default: "`false`",
                "`true`: Redis Cluster (host and port are a seed node; keys hash-tagged)"),
            Setting("pushrelay.redis.cluster.seeds", .text, default: "empty", "more seed nodes, `host:port,host:port`"),
            Setting(
                "pushrelay.redis.username", .text, default: "unset",
                "an ACL user (`AUTH user password`); needs a password"),
            Setting(
                "pushrelay.redis.password.file", .path, default: "unset",
                """
                a file whose first line is the password (`requirepass`, or the ACL user's); sent first on \
                every connection, each cluster node's too
                """),
            Setting(
                "pushrelay.redis.password", .secret, default: "unset",
                """
                the password itself, e.g. from a Kubernetes `secretKeyRef` (not both this and the file); never \
                quoted in a message
                """),
            Setting(
                "pushrelay.redis.tls", .bool, default: "`false`",
                "`true`: TLS on every connection (each cluster node's too, MOVED and ASK included)"),
            Setting(
                "pushrelay.redis.tls.ca.file", .path, default: "the system's trust store",
                "the CA the server's certificate must chain to"),
            Setting(
                "pushrelay.redis.tls.cert.file", .path, default: "unset",
                "a client certificate (with the key below), for a Redis with `tls-auth-clients yes`"),
            Setting("pushrelay.redis.tls.key.file", .path, default: "unset", "its private key (PEM)"),
            Setting(
                "pushrelay.redis.tls.server.name", .text, default: "the host",
                """
                the name the certificate must carry (and SNI), for every node of a cluster too; a certificate \
                that names the IP address connected to is also accepted (swift-nio-ssl's check)
                """),
            Setting(
                "pushrelay.redis.tls.verify", .bool, default: "`true`",
                "`false` turns certificate checks off (never in production)"),
        ])

    static let topics = Section(
        "Topics and retries",
        "The pipeline's topics, how `pushrelay topics create` makes them, and the retry schedule.",
        [
            Setting("pushrelay.topic.requests", .topic, default: "`push.requests`", "ingest, encryptor, replay tool"),
            Setting("pushrelay.topic.outbound", .topic, default: "`push.outbound`", "encryptor, dispatcher"),
            Setting("pushrelay.topic.feedback", .topic, default: "`push.feedback`", "dispatcher, feedback"),
            Setting("pushrelay.topic.deliveries", .topic, default: "`push.deliveries`", "encryptor, dispatcher"),
            Setting("pushrelay.topic.deadletter", .topic, default: "`push.deadletter`", "dispatcher, replay tool"),
            Setting(
                "pushrelay.topic.hooks", .topic, default: "`push.hooks`",
                "feedback: failed pushes on their way to servers' feedback hooks"),
            Setting("pushrelay.topic.retry.prefix", .topic, default: "`push.retry.`", "dispatcher, replay tool"),
            Setting(
                "pushrelay.topic.partitions", .int(1...10_000), default: "`12`",
                """
                `pushrelay topics create`: partitions of each topic it creates (the most busy replicas a \
                consumer group can have)
                """),
            Setting(
                "pushrelay.topic.replication.factor", .int(1...32), default: "`3`",
                "`pushrelay topics create`"),
            Setting(
                "pushrelay.topic.min.insync.replicas", .int(1...32), default: "`2`",
                "`pushrelay topics create`: `min.insync.replicas` (the producers write with `acks=all`)"),
            Setting(
                "pushrelay.topic.retention.ms", .int(60_000...(3650 * 86_400_000)), default: "`604800000` (7 days)",
                "`pushrelay topics create`: `retention.ms`, how long a topic can be replayed"),
            Setting(
                "pushrelay.retry.delays", .delays, default: "`5s,1m,10m`",
                "dispatcher: one retry topic per delay (`ms`, `s`, `m`, `h`); the dev broker creates three"),
            Setting(
                "pushrelay.retry.max.attempts", .int(1...100), default: "`6`",
                "dispatcher: attempts before dead-lettering"),
            Setting("pushrelay.retry.jitter", .double(0...0.9), default: "`0.2`", "dispatcher: ± share of the delay"),
        ])

    static let process = Section(
        "Listeners, logs and the process",
        "The API and ops listeners, logs, the executor and shutdown.",
        [
            Setting("pushrelay.http.host", .text, default: "`127.0.0.1`", "all (`0.0.0.0` in containers)"),
            Setting(
                "pushrelay.http.port", .int(0...65535),
                default: "ingest `8080`, encryptor `8081`, dispatcher `8082`, feedback `8083`",
                "all (ingest: the API; the others: health and metrics)"),
            Setting("pushrelay.ops.host", .text, default: "`127.0.0.1`", "ingest: health and metrics"),
            Setting("pushrelay.ops.port", .int(0...65535), default: "`9080`", "ingest"),
            Setting(
                "pushrelay.http.header.timeout.ms", .int(100...600_000), default: "`10000`",
                "every listener (see docs/security.md)"),
            Setting("pushrelay.http.body.timeout.ms", .int(100...600_000), default: "`30000`", "every listener"),
            Setting("pushrelay.http.idle.timeout.ms", .int(100...3_600_000), default: "`60000`", "every listener"),
            Setting("pushrelay.http.max.connections", .int(1...1_000_000), default: "`10000`", "every listener"),
            Setting(
                "pushrelay.http.client.ip.header", .headerName, default: "unset (TCP peer)",
                "ingest: header a trusted proxy sets with the client address"),
            Setting("pushrelay.log.level", .oneOf(Logger.Level.allCases.map(\.rawValue)), default: "`info`", "all"),
            Setting(
                "pushrelay.executor", .oneOf(["loops", "pool"]), default: "`loops`",
                """
                all: `loops` runs Swift concurrency's tasks on NIO's event loops (a task resumes where its \
                socket is, no thread switch); `pool` keeps Swift's own thread pool
                """),
            Setting(
                "pushrelay.event.loops", .int(1...256), default: "`1`",
                """
                all: NIO event loops (threads) of the process; a stage scales by replicas (on 2 cores one loop \
                took no more CPU than two, and less memory: \
                benchmarks/history/19-issue-27-part-3-threads-and-requests.md)
                """),
            Setting(
                "pushrelay.malloc.arenas", .int(1...64), default: "`2`",
                "all: glibc malloc arenas (one per thread that allocates is most of an idle service's memory)"),
            Setting(
                "pushrelay.shutdown.timeout.ms", .int(1000...600_000), default: "`30000`",
                """
                all: how long a graceful stop (drain, commit, flush) may take before what is left is cancelled \
                (then up to 5 s of cancellation)
                """),
            Setting(
                "pushrelay.shutdown.grace.seconds", .int(10...3600), default: "unset",
                """
                all: the platform's time from SIGTERM to SIGKILL (Kubernetes' \
                `terminationGracePeriodSeconds`); when set, the stop's timeout is derived from it: grace − \
                preStop − 5 s of cancellation − 3 s of margin (not with `PUSHRELAY_SHUTDOWN_TIMEOUT_MS`)
                """),
            Setting(
                "pushrelay.shutdown.prestop.seconds", .int(0...600), default: "`0`",
                "all: a preStop pause that comes out of that grace period"),
        ])

    static let keys = Section(
        "Key files",
        "Files holding the relay's own keys. None has a default outside the dev stack.",
        [
            Setting(
                "pushrelay.pipeline.keys.file", .path, default: "required",
                "ingest, encryptor, dispatcher: lines `key_id:base64(32 bytes)`, first line seals, all open"),
            Setting(
                "pushrelay.bouncer.keys.file", .path, default: "required",
                "ingest: base64 X25519 secret keys, one per line"),
            Setting(
                "pushrelay.storage.keys.file", .path, default: "required",
                "ingest, encryptor, feedback (see docs/security.md)"),
            Setting("pushrelay.apikey.pepper.file", .path, default: "required", "ingest, `pushrelay`"),
        ])
}
