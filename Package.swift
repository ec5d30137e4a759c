// swift-tools-version:6.2
import PackageDescription

// Our targets: Swift 6 language mode, and every warning is an error; existentials
// spelled `any`, and a module's members visible only where it is imported.
let strict: [SwiftSetting] = [
    .swiftLanguageMode(.v6), .treatAllWarnings(as: .error), .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

/// What the stage test targets (StageTestSupport, StageTests, StageIntegrationTests) use.
let stageTestDependencies: [Target.Dependency] = [
    "IngestCore", "EncryptorCore", "DispatcherCore", "FeedbackCore", "ServiceKit", "Providers", "DevStack",
    "PushModels", "PushCrypto", "DeviceState", "RedisClient", "Kafka", "StatusPush", "APIContract",
    .product(name: "SwiftProtobuf", package: "swift-protobuf"),
    .product(name: "HummingbirdTesting", package: "hummingbird"),
    .product(name: "Hummingbird", package: "hummingbird"),
    .product(name: "Configuration", package: "swift-configuration"),
    .product(name: "Logging", package: "swift-log"),
    .product(name: "NIOCore", package: "swift-nio"),
    .product(name: "HTTPTypes", package: "swift-http-types"),
]

let package = Package(
    name: "PushRelay",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "ingest", targets: ["ingest"]),
        .executable(name: "encryptor", targets: ["encryptor"]),
        .executable(name: "dispatcher", targets: ["dispatcher"]),
        .executable(name: "feedback", targets: ["feedback"]),
        .executable(name: "devbroker", targets: ["devbroker"]),
        .executable(name: "provider-fakes", targets: ["provider-fakes"]),
        .executable(name: "demo-device", targets: ["demo-device"]),
        .executable(name: "chaos", targets: ["chaos"]),
        .executable(name: "loadgen", targets: ["loadgen"]),
        .executable(name: "pushrelay", targets: ["pushrelay"]),
        .executable(name: "pushrelay-fuzz", targets: ["pushrelay-fuzz"]),
    ],
    dependencies: [
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-crypto", from: "4.5.2"),
        .package(url: "https://github.com/vapor/jwt-kit", from: "5.8.0"),
        .package(url: "https://github.com/apple/swift-certificates", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-asn1", from: "1.7.4"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-nio-http2", from: "1.46.0"),
        .package(url: "https://github.com/apple/swift-nio-extras", from: "1.35.2"),
        .package(url: "https://github.com/apple/swift-http-types", from: "1.8.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        .package(url: "https://github.com/apple/swift-configuration", from: "1.4.0"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/google/swift-benchmark", from: "0.1.2"),
        .package(url: "https://github.com/apple/swift-protobuf", from: "1.39.0"),
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.7.3"),
        .package(url: "https://github.com/apple/swift-service-context", from: "1.5.1"),
        .package(url: "https://github.com/swift-otel/swift-otel", from: "1.6.0"),
        // The test OTLP receiver's gRPC side (swift-otel's gRPC exporter uses them too).
        .package(url: "https://github.com/grpc/grpc-swift-2", from: "2.4.3"),
        .package(url: "https://github.com/grpc/grpc-swift-nio-transport", from: "2.9.2"),
    ],
    targets: [
        // C libraries from Debian, each used by exactly one Swift wrapper module.
        .systemLibrary(
            name: "CRdKafka", path: "Shared/CRdKafka", pkgConfig: "rdkafka",
            providers: [.apt(["librdkafka-dev"])]),
        .systemLibrary(
            name: "CHiredis", path: "Shared/CHiredis", pkgConfig: "hiredis",
            providers: [.apt(["libhiredis-dev"])]),
        .systemLibrary(
            name: "CSodium", path: "Shared/CSodium", pkgConfig: "libsodium",
            providers: [.apt(["libsodium-dev"])]),
        .systemLibrary(
            name: "CLibCrypto", path: "Shared/CLibCrypto", pkgConfig: "libcrypto",
            providers: [.apt(["libssl-dev"])]),
        .systemLibrary(
            name: "CSecp256k1", path: "Shared/CSecp256k1", pkgConfig: "libsecp256k1",
            providers: [.apt(["libsecp256k1-dev"])]),

        // Plain Sendable value types: envelopes, ids, payloads and their validation. No I/O.
        // Its records are declared in Records.wire and generated by scripts/wiregen.py.
        .target(name: "PushModels", path: "Shared/PushModels", exclude: ["Records.wire"], swiftSettings: strict),
        // Log metadata keys, one enum for every module that logs (the wrappers too).
        .target(name: "LogKeys", path: "Shared/LogKeys", swiftSettings: strict),
        // docs/api/openapi.json as ingest serves it (scripts/openapi-embed.py writes it).
        .target(name: "APIContract", path: "Shared/APIContract", swiftSettings: strict),
        .target(
            name: "Kafka",
            dependencies: [
                "CRdKafka", "LogKeys",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            path: "Shared/Kafka", swiftSettings: strict),
        .target(
            name: "RedisClient",
            dependencies: [
                "CHiredis", .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"), .product(name: "NIOTLS", package: "swift-nio"),
            ],
            path: "Shared/RedisClient", swiftSettings: strict),
        .target(
            name: "PushCrypto",
            dependencies: [
                "CSodium", "CLibCrypto", "PushModels", .product(name: "Crypto", package: "swift-crypto"),
            ],
            path: "Shared/PushCrypto", swiftSettings: strict),
        // The Status push-server protocol: its protobuf messages (generated once, committed),
        // secp256k1 signatures and ECDH, Keccak-256 and SHAKE-256, and the spec's rules.
        .target(
            name: "StatusPush",
            dependencies: [
                "CSecp256k1", "CLibCrypto", "PushModels", "PushCrypto",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "SwiftProtobuf", package: "swift-protobuf"),
            ],
            path: "Shared/StatusPush", exclude: ["Proto"], swiftSettings: strict),
        .target(
            name: "DeviceState",
            dependencies: ["RedisClient", "PushModels", "PushCrypto"],
            path: "Shared/DeviceState", swiftSettings: strict),
        .target(
            name: "Providers",
            dependencies: [
                "PushModels", "PushCrypto", "LogKeys", .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Shared/Providers", swiftSettings: strict),
        .target(
            name: "ServiceKit",
            dependencies: [
                "Kafka", "RedisClient", "PushModels", "PushCrypto", "DeviceState", "LogKeys",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "Instrumentation", package: "swift-distributed-tracing"),
                .product(name: "ServiceContextModule", package: "swift-service-context"),
                .product(name: "OTel", package: "swift-otel"),
            ],
            path: "Shared/ServiceKit", swiftSettings: strict),
        .target(
            name: "FakeProviders",
            dependencies: [
                "PushModels",
                .product(name: "GRPCCore", package: "grpc-swift-2"),
                .product(name: "GRPCNIOTransportHTTP2", package: "grpc-swift-nio-transport"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "NIOHTTPTypesHTTP1", package: "swift-nio-extras"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CryptoExtras", package: "swift-crypto"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            path: "Dev/FakeProviders", swiftSettings: strict),

        // Development only (Dev/): never linked into the four services or the production image.
        // librdkafka's mock cluster, through the Kafka module's `@_spi(Dev)` internals.
        .target(name: "KafkaDev", dependencies: ["Kafka", "CRdKafka"], path: "Dev/KafkaDev", swiftSettings: strict),
        // The whole stack as child processes, for the integration tests and the chaos and load tools.
        .target(
            name: "DevStack",
            dependencies: [
                "PushModels", "PushCrypto", "Kafka", "FakeProviders", .product(name: "Logging", package: "swift-log"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
            ],
            path: "Dev/DevStack", swiftSettings: strict),

        // The four stages: each stage's logic is a library (`…Core`) behind small protocols
        // (ServiceKit/Seams.swift); each executable only reads its configuration, builds, runs.
        .target(
            name: "IngestCore",
            dependencies: [
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                "ServiceKit", "DeviceState", "PushCrypto", "PushModels", "Kafka", "RedisClient", "StatusPush",
                "Providers", "LogKeys", "APIContract",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "SwiftProtobuf", package: "swift-protobuf"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            path: "Services/IngestCore", swiftSettings: strict),
        .executableTarget(
            name: "ingest", dependencies: ["IngestCore", "ServiceKit"], path: "Services/Ingest", swiftSettings: strict),
        .target(
            name: "EncryptorCore",
            dependencies: [
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                "ServiceKit", "DeviceState", "PushCrypto", "PushModels", "Kafka", "RedisClient", "LogKeys",
                .product(name: "Configuration", package: "swift-configuration"),
            ],
            path: "Services/EncryptorCore", swiftSettings: strict),
        .executableTarget(
            name: "encryptor", dependencies: ["EncryptorCore", "ServiceKit"], path: "Services/Encryptor",
            swiftSettings: strict),
        .target(
            name: "DispatcherCore",
            dependencies: [
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                "ServiceKit", "Providers", "PushModels", "PushCrypto", "Kafka", "DeviceState", "RedisClient",
                "LogKeys", .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            path: "Services/DispatcherCore", swiftSettings: strict),
        .executableTarget(
            name: "dispatcher", dependencies: ["DispatcherCore", "ServiceKit"], path: "Services/Dispatcher",
            swiftSettings: strict),
        .target(
            name: "FeedbackCore",
            dependencies: [
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                "ServiceKit", "DeviceState", "PushModels", "PushCrypto", "Kafka", "RedisClient", "Providers",
                "LogKeys", .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            path: "Services/FeedbackCore", swiftSettings: strict),
        .executableTarget(
            name: "feedback", dependencies: ["FeedbackCore", "ServiceKit"], path: "Services/Feedback",
            swiftSettings: strict),
        // Dev tooling: the embedded Kafka-protocol broker and the provider fakes.
        .executableTarget(
            name: "devbroker", dependencies: ["KafkaDev", "Kafka", "ServiceKit"], path: "Dev/DevBroker",
            swiftSettings: strict),
        .executableTarget(
            name: "provider-fakes",
            dependencies: [
                "FakeProviders", "ServiceKit",
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            path: "Dev/FakeProvidersServer", swiftSettings: strict),

        .executableTarget(
            name: "demo-device",
            dependencies: [
                "PushCrypto", "PushModels", "StatusPush", .product(name: "SwiftProtobuf", package: "swift-protobuf"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"), .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ],
            path: "Tools/DemoDevice", swiftSettings: strict),

        .executableTarget(
            name: "chaos",
            dependencies: [
                "DevStack", "PushModels", "Kafka", "ReplayKit",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "Tools/Chaos", swiftSettings: strict),

        .executableTarget(
            name: "loadgen",
            dependencies: ["DevStack", .product(name: "ArgumentParser", package: "swift-argument-parser")],
            path: "Tools/LoadGen", swiftSettings: strict),
        .executableTarget(
            name: "microbench",
            dependencies: [
                "PushCrypto", "PushModels", "Providers", "StatusPush",
                .product(name: "Benchmark", package: "swift-benchmark"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            path: "benchmarks/Micro", swiftSettings: [.swiftLanguageMode(.v5)]),
        .target(
            name: "ReplayKit", dependencies: ["Kafka", "PushModels"], path: "Tools/ReplayKit", swiftSettings: strict),
        .executableTarget(
            name: "pushrelay-fuzz",
            dependencies: [
                "DevStack", "PushModels", .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "Tools/Fuzz", swiftSettings: strict),

        // The operator's tool: servers, devices, test sends, topics, traces, replays, dead letters.
        .executableTarget(
            name: "pushrelay",
            dependencies: [
                "ReplayKit", "ServiceKit", "DeviceState", "RedisClient", "PushCrypto", "PushModels", "Kafka",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ],
            path: "Tools/PushRelay", swiftSettings: strict),

        // Fixtures: the record corpus and reading rules of each release (read by path).
        .testTarget(
            name: "PushModelsTests", dependencies: ["PushModels", "ReplayKit"], exclude: ["Fixtures"],
            swiftSettings: strict),
        .testTarget(
            name: "StatusPushTests",
            dependencies: [
                "StatusPush", "PushModels", "PushCrypto", .product(name: "Crypto", package: "swift-crypto"),
            ],
            exclude: ["Fixtures"], swiftSettings: strict),
        .testTarget(
            name: "PushCryptoTests", dependencies: ["PushCrypto", "PushModels"], swiftSettings: strict),
        .testTarget(
            name: "ProvidersTests",
            dependencies: [
                "Providers", "PushModels", "FakeProviders", "IngestCore",
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdHTTP2", package: "hummingbird"),
            ],
            swiftSettings: strict),
        .testTarget(
            name: "KafkaTests", dependencies: ["Kafka", "KafkaDev", .product(name: "Logging", package: "swift-log")],
            swiftSettings: strict),
        .testTarget(
            name: "PipelineTests",
            dependencies: [
                "DevStack", "ServiceKit", "PushModels", "Kafka", "ReplayKit", "PushCrypto", "DeviceState",
                "RedisClient", "StatusPush", .product(name: "SwiftProtobuf", package: "swift-protobuf"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: strict),
        // Each stage's logic driven with in-memory seams (no sockets), and ingest's routes
        // through Hummingbird's router test framework on in-memory stores.
        // What the stage tests share: in-memory stores and fakes, the router fixture (in
        // memory or on the test stack's Redis) and the transfer scenarios. A test target
        // without tests that the two below depend on (SwiftPM's native build system builds
        // it only for the tests, so release builds never see its `@testable` imports).
        .testTarget(
            name: "StageTestSupport",
            dependencies: stageTestDependencies,
            path: "Tests/StageTestSupport", swiftSettings: strict),
        // The unit tier's stage tests: no sockets, no child processes.
        .testTarget(
            name: "StageTests",
            dependencies: ["StageTestSupport"] + stageTestDependencies,
            swiftSettings: strict),
        // The stage tests that need the test stack's Redis (the router's Redis stores and scripts).
        .testTarget(
            name: "StageIntegrationTests",
            dependencies: ["StageTestSupport"] + stageTestDependencies,
            swiftSettings: strict),
        // The standing fuzz tests: the JSON reader alone, and every ingest endpoint on a running stack.
        .testTarget(
            name: "FuzzTests",
            dependencies: ["DevStack", "PushModels", "PushCrypto"],
            swiftSettings: strict),
    ]
)
