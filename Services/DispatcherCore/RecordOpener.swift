import CoreMetrics
import LogKeys
import Logging
import Providers
import PushCrypto
import PushModels
import ServiceKit

/// Opens a `push.outbound` record into the `ProviderPush` its provider client sends:
/// the sealed token and body opened with the pipeline keys, each bound to the record's
/// (notification, realm, device). The record is left as it came, token and body sealed,
/// for whatever is published after the attempt (retry, dead letter).
struct RecordOpener: Sendable {
    let pipelineKeys: PipelineKeyring
    let logger: Logger

    /// What a record opens to.
    enum Opened {
        /// The push to hand to the provider client.
        case push(ProviderPush)
        /// Its sealed token or body does not open for this record (unknown key, or moved
        /// from another record): `token_unreadable` or `body_unreadable`.
        case unreadable(StageReason)
    }

    /// The record opened: its token and body, sealed or (in records from before they
    /// were sealed) in the clear, with the record's other fields.
    func open(_ record: OutboundRecord) -> Opened {
        guard let token = token(of: record) else { return .unreadable(.tokenUnreadable) }
        guard let body = body(of: record) else { return .unreadable(.bodyUnreadable) }
        return .push(ProviderPush(record: record, token: token, body: body))
    }

    /// The record as the dispatcher publishes it again (retry topic, dead letter): as it
    /// came, except that a token still in the clear (a record from before tokens were
    /// sealed) is sealed here, so nothing published from now on carries it in the clear.
    func resealed(_ record: OutboundRecord) -> OutboundRecord {
        guard record.sealedToken == nil,
            let sealed = try? pipelineKeys.seal(Array(record.token.utf8), binding: Self.tokenBinding(record))
        else { return record }
        var next = record
        next.sealedToken = sealed
        // As the record decodes once published: a sealed token and no clear one.
        next.token = ""
        return next
    }

    /// The clear token: `sealedToken` opened, or `token` in a record that has no sealed one.
    /// Nil when the sealed token does not open for this record.
    func token(of record: OutboundRecord) -> String? {
        guard let sealed = record.sealedToken else { return record.token }
        do {
            let bytes = try pipelineKeys.open(sealed, binding: Self.tokenBinding(record))
            guard let token = String(validating: bytes, as: UTF8.self) else {
                throw CryptoError(.invalidCiphertext, "sealed token is not UTF-8")
            }
            return token
        } catch {
            unreadable("token", record, error)
            return nil
        }
    }

    /// The body bytes to send: `sealedBody` opened (legacy Zulip content), or `body`.
    /// Nil when the sealed body does not open for this record.
    func body(of record: OutboundRecord) -> [UInt8]? {
        guard let sealed = record.sealedBody else { return record.body }
        do {
            return try pipelineKeys.open(
                sealed,
                binding: .body(
                    notificationID: record.notificationID, realmUUID: record.realmUUID, deviceID: record.deviceID))
        } catch {
            unreadable("body", record, error)
            return nil
        }
    }

    static func tokenBinding(_ record: OutboundRecord) -> SealBinding {
        .token(notificationID: record.notificationID, realmUUID: record.realmUUID, deviceID: record.deviceID)
    }

    /// Counts and logs a sealed part (`token` or `body`) that does not open.
    private func unreadable(_ part: String, _ record: OutboundRecord, _ error: any Error) {
        RelayMetrics.unreadable(part, provider: record.provider.rawValue).increment()
        logger.error(
            "cannot open the sealed \(part)",
            metadata: [
                LogKey.notificationID: "\(record.notificationID)", LogKey.deviceID: "\(record.deviceID)",
                LogKey.error: "\(error)",
            ])
    }
}
