import FakeProviders
import Foundation
import NIOCore
import NIOHTTP2
import NIOPosix
import NIOSSL

/// A TLS HTTP/2 listener on loopback for the client tests, with the provider fakes'
/// certificate (its CA in `caFile`): `frames` makes each connection's frame handler.
struct LoopbackHTTP2Listener {
    let channel: any Channel
    let port: Int
    let caFile: String

    static func start(
        name: String, settings: HTTP2Settings, frames: @escaping @Sendable () -> any ChannelHandler
    ) async throws -> LoopbackHTTP2Listener {
        let directory = NSTemporaryDirectory() + "\(name)-\(UUID().uuidString)"
        let credentials = try FakeCredentials.loadOrCreate(directory: directory)
        try credentials.writeClientFiles(apnsURL: "https://localhost", fcmURL: "https://localhost")
        var tls = TLSConfiguration.makeServerConfiguration(
            certificateChain: try NIOSSLCertificate.fromPEMBytes(Array(credentials.serverCertificatePEM.utf8)).map {
                .certificate($0)
            },
            privateKey: .privateKey(try NIOSSLPrivateKey(bytes: Array(credentials.serverKeyPEM.utf8), format: .pem)))
        tls.applicationProtocols = ["h2"]
        let context = try NIOSSLContext(configuration: tls)
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: context))
                    try channel.pipeline.syncOperations.addHandler(
                        NIOHTTP2Handler(mode: .server, initialSettings: settings))
                    try channel.pipeline.syncOperations.addHandler(frames())
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        return LoopbackHTTP2Listener(
            channel: channel, port: channel.localAddress?.port ?? 0, caFile: credentials.caFile)
    }
}
