import Crypto
import PushCrypto
import PushModels
import Foundation
import SwiftProtobuf

public typealias StatusRegistration = Protobuf_PushNotificationRegistration
public typealias StatusRegistrationResponse = Protobuf_PushNotificationRegistrationResponse
public typealias StatusQuery = Protobuf_PushNotificationQuery
public typealias StatusQueryInfo = Protobuf_PushNotificationQueryInfo
public typealias StatusQueryResponse = Protobuf_PushNotificationQueryResponse
public typealias StatusNotification = Protobuf_PushNotification
public typealias StatusNotificationRequest = Protobuf_PushNotificationRequest
public typealias StatusNotificationReport = Protobuf_PushNotificationReport
public typealias StatusNotificationResponse = Protobuf_PushNotificationResponse
public typealias StatusEnvelopeMessage = Protobuf_ApplicationMetadataMessage

/// The hashes and keys of the Status push-server spec (seeds/003, docs/api/status.md):
/// SHAKE-256 with 64 bytes of output, Keccak-256, secp256k1 and AES-256-GCM.
public enum StatusCrypto {
    /// SHAKE-256, 64 bytes: public-key hashes, chat ids, authors, `request_id`.
    public static func shake256(_ bytes: [UInt8]) -> [UInt8] {
        // libcrypto's SHAKE cannot fail on valid input; all-zero would be caught by every comparison.
        Shake256.hash(bytes) ?? [UInt8](repeating: 0, count: Shake256.statusLength)
    }

    /// How the server stores and looks up a client: SHAKE-256 of its 33-byte compressed key.
    public static func hashedPublicKey(_ key: Secp256k1.PublicKey) -> [UInt8] { shake256(key.compressed) }

    /// The grant: the client's signature over Keccak-256(client key ‖ server key ‖ access
    /// token), both keys compressed (33 bytes each), the token as UTF-8.
    public static func grantHash(client: Secp256k1.PublicKey, server: Secp256k1.PublicKey, accessToken: String)
        -> [UInt8]
    {
        Keccak.keccak256(client.compressed, server.compressed, Array(accessToken.utf8))
    }

    public static func makeGrant(
        client: Secp256k1.PrivateKey, server: Secp256k1.PublicKey, accessToken: String
    ) throws(StatusCryptoError) -> [UInt8] {
        try client.sign(hash: grantHash(client: try client.publicKey(), server: server, accessToken: accessToken))
    }

    /// Whether `grant` is `client`'s signature for this server and token.
    public static func verifyGrant(
        _ grant: [UInt8], client: Secp256k1.PublicKey, server: Secp256k1.PublicKey, accessToken: String
    ) -> Bool {
        let hash = grantHash(client: client, server: server, accessToken: accessToken)
        guard let signer = try? Secp256k1.PublicKey.recover(signature: grant, hash: hash) else { return false }
        return signer == client
    }

    /// AES-256-GCM under the ECDH key of the two identities: `nonce(12) ‖ ciphertext ‖ tag(16)`.
    public static func encrypt(_ plaintext: [UInt8], key: [UInt8]) throws -> [UInt8] {
        let sealed = try AES.GCM.seal(plaintext, using: SymmetricKey(data: key))
        guard let combined = sealed.combined else { throw StatusCryptoError.undecryptable }
        return Array(combined)
    }

    public static func decrypt(_ ciphertext: [UInt8], key: [UInt8]) throws(StatusCryptoError) -> [UInt8] {
        guard ciphertext.count >= 12 + 16 else { throw .undecryptable }
        do {
            let box = try AES.GCM.SealedBox(combined: ciphertext)
            return Array(try AES.GCM.open(box, using: SymmetricKey(data: key)))
        } catch {
            throw .undecryptable
        }
    }

    /// Whether `text` is a UUID as Status clients write them (36 characters, hex and dashes).
    public static func isUUID(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        guard bytes.count == 36 else { return false }
        for (i, byte) in bytes.enumerated() {
            if [8, 13, 18, 23].contains(i) {
                guard byte == UInt8(ascii: "-") else { return false }
            } else {
                guard byte.isHexDigit else { return false }
            }
        }
        return true
    }

    /// `0x` and lower-case hex, as status-go's `types.EncodeHex` writes bytes for gorush.
    public static func hex0x(_ bytes: [UInt8]) -> String { "0x" + Fingerprint.hex(bytes) }
}

/// A signed Status message (`ApplicationMetadataMessage`) as the HTTP endpoints take and
/// give them: the signer's key is recovered from the signature over Keccak-256(payload).
public struct StatusEnvelope: Sendable {
    public typealias MessageType = StatusEnvelopeMessage.TypeEnum

    public let type: MessageType
    public let payload: [UInt8]
    public let signer: Secp256k1.PublicKey
    /// The transport message id: Keccak-256(uncompressed signer key ‖ the encoded message),
    /// as status-go's `v1.MessageID`. Queries answer with it; requests are deduplicated on it.
    public let messageID: [UInt8]

    public enum Problem: Error, Equatable, Sendable {
        /// Not an `ApplicationMetadataMessage`.
        case malformed
        /// Missing, or not a recoverable secp256k1 signature of the payload.
        case badSignature
        case wrongType(expected: MessageType, got: Int)
    }

    /// Opens a message, checking it is of `expected` type and validly signed.
    public init(bytes: [UInt8], expected: MessageType) throws(Problem) {
        let message: StatusEnvelopeMessage
        do {
            message = try StatusEnvelopeMessage(serializedBytes: bytes)
        } catch {
            throw .malformed
        }
        guard message.type == expected else { throw .wrongType(expected: expected, got: message.type.rawValue) }
        let payload = Array(message.payload)
        guard
            let signer = try? Secp256k1.PublicKey.recover(
                signature: Array(message.signature), hash: Keccak.keccak256(payload))
        else { throw .badSignature }
        self.type = expected
        self.payload = payload
        self.signer = signer
        self.messageID = Keccak.keccak256(signer.uncompressed, bytes)
    }

    /// A message signed by `key`.
    public static func seal(_ payload: [UInt8], type: MessageType, key: Secp256k1.PrivateKey) throws -> [UInt8] {
        var message = StatusEnvelopeMessage()
        message.type = type
        message.payload = Data(payload)
        message.signature = Data(try key.sign(hash: Keccak.keccak256(payload)))
        return try message.serializedBytes()
    }
}

/// The spec's registration rules (MUSTs), in the order the server applies them.
public enum StatusRegistrationRules {
    public typealias ErrorType = StatusRegistrationResponse.ErrorType

    /// Most bytes of a device token; of an installation id; most entries of each list, and
    /// most bytes of one entry (hashes are 32 or 64 bytes, an encrypted token 64).
    public static let maxTextBytes = 4096
    public static let maxInstallationBytes = 256
    public static let maxListEntries = 1000
    public static let maxEntryBytes = 128

    /// What a decrypted registration is: accepted (a registration or an unregistration),
    /// or the error the response carries.
    public enum Verdict: Equatable, Sendable {
        case register(StatusRegistration)
        case unregister(StatusRegistration)
        case refused(ErrorType, reason: String)
    }

    /// Checks `registration` from `client` for this server, against the version stored for
    /// (client, installation) (0 when none). `enabled` and the lists are preferences, not
    /// checked here.
    public static func check(
        _ registration: StatusRegistration, client: Secp256k1.PublicKey, server: Secp256k1.PublicKey,
        storedVersion: UInt64
    ) -> Verdict {
        let installation = registration.installationID
        guard !installation.isEmpty, installation.utf8.count <= maxInstallationBytes else {
            return .refused(
                .malformedMessage, reason: "installation_id: must be non-empty, at most \(maxInstallationBytes) bytes")
        }
        // An empty (zero) version is a malformed message, like an empty token (spec, "Handle Errors").
        guard registration.version != 0 else {
            return .refused(.malformedMessage, reason: "version: must be non-zero")
        }
        guard registration.version > storedVersion else {
            return .refused(
                .versionMismatch, reason: "version: must be greater than the stored version \(storedVersion)")
        }
        if registration.unregister { return .unregister(registration) }
        switch registration.tokenType {
        case .apnToken, .firebaseToken: break
        default:
            return .refused(
                .unsupportedTokenType, reason: "token_type: \(registration.tokenType.rawValue) is not supported")
        }
        guard !registration.deviceToken.isEmpty, registration.deviceToken.utf8.count <= maxTextBytes else {
            return .refused(.malformedMessage, reason: "device_token: must be non-empty")
        }
        guard StatusCrypto.isUUID(registration.accessToken) else {
            return .refused(.malformedMessage, reason: "access_token: must be a UUID")
        }
        if registration.tokenType == .apnToken {
            guard !registration.apnTopic.isEmpty, registration.apnTopic.utf8.count <= 255 else {
                return .refused(.malformedMessage, reason: "apn_topic: must be set for APN tokens")
            }
        }
        guard !registration.grant.isEmpty,
            StatusCrypto.verifyGrant(
                Array(registration.grant), client: client, server: server, accessToken: registration.accessToken)
        else {
            return .refused(.malformedMessage, reason: "grant: not a signature by the client for this server")
        }
        let lists = [
            registration.allowedKeyList, registration.blockedChatList, registration.allowedMentionsChatList,
            registration.mutedChatList,
        ]
        guard lists.allSatisfy({ $0.count <= maxListEntries && $0.allSatisfy { $0.count <= maxEntryBytes } }) else {
            return .refused(
                .malformedMessage,
                reason: "lists: at most \(maxListEntries) entries of at most \(maxEntryBytes) bytes each")
        }
        return .register(registration)
    }
}

/// The per-device preferences, applied to each notification request.
public enum StatusPreferences {
    /// Why a notification is not sent to a registration, or nil when it is.
    /// - `enabled` false: nothing (`disabled`);
    /// - `blocked_chat_list` holding the chat or the author: `blocked_chat`, `blocked_author`;
    /// - `muted_chat_list` holding the chat: messages only (`muted_chat`);
    /// - mentions: `block_mentions` (`mentions_blocked`), and only in the chats of
    ///   `allowed_mentions_chat_list` (`mention_not_allowed`);
    /// - `allow_from_contacts_only` with an empty `allowed_key_list`: no contact holds the
    ///   access token, so nobody may notify (`contacts_only`). With a list, the token is the
    ///   gate: only contacts can decrypt it from the query answer.
    public static func filterReason(_ notification: StatusNotification, for registration: StatusRegistration)
        -> PreferenceReason?
    {
        let chat = notification.chatID
        let author = notification.author
        if !registration.enabled { return .disabled }
        if registration.allowFromContactsOnly, registration.allowedKeyList.isEmpty { return .contactsOnly }
        if !author.isEmpty, registration.blockedChatList.contains(author) { return .blockedAuthor }
        switch notification.type {
        case .message:
            if registration.blockedChatList.contains(chat) { return .blockedChat }
            if registration.mutedChatList.contains(chat) { return .mutedChat }
        case .mention:
            if registration.blockMentions { return .mentionsBlocked }
            if !registration.allowedMentionsChatList.contains(chat) { return .mentionNotAllowed }
        default:
            break
        }
        return nil
    }

    /// The text of the visible notification, as status-go's gorush request has it.
    public static func text(_ type: StatusNotification.PushNotificationType) -> String {
        switch type {
        case .message: "You have a new message"
        case .requestToJoinCommunity: "Someone requested to join a community you are an admin of"
        default: "Someone mentioned you"
        }
    }
}
