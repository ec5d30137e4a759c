import DeviceState
import Foundation
import Hummingbird
import NIOCore
import PushCrypto
import PushModels
import RedisClient
import ServiceKit
import StatusPush
import SwiftProtobuf

/// The Status push server's settings (README, "Run a Status push server").
public struct StatusSettings: Sendable {
    public var enabled: Bool
    /// The server identity: a secp256k1 private key, 64 hex digits, in this file.
    public var keyFile: String
    /// The realm Status devices are stored under.
    public var realmUUID: String
    /// Most targets in one notification request.
    public var maxTargets: Int
    /// Requests per client address per window: the endpoints take no credentials, and each
    /// request costs a signature recovery.
    public var maxRequests: Int
    public var windowSeconds: Int
    /// The APNs topics (bundle ids) registrations may name: the relay's APNs key is good
    /// for every app of its team, so an anonymous client must not pick the app.
    public var apnsTopics: Set<String>

    public static let defaultRealm = "5f7a7e5b-0c4e-4b7e-8f3a-5354a7f5e001"

    public init(reader: SettingsReader) throws {
        enabled = try reader.bool("pushrelay.status.enabled", default: false)
        keyFile = try reader.string("pushrelay.status.key.file", default: "")
        realmUUID = try reader.string("pushrelay.status.realm.uuid", default: Self.defaultRealm)
        maxTargets = try reader.int("pushrelay.status.max.targets", default: 100)
        maxRequests = try reader.int("pushrelay.status.requests.max", default: 600)
        windowSeconds = try reader.int("pushrelay.status.requests.window.seconds", default: 60)
        apnsTopics = Set(try reader.list("pushrelay.status.apns.topics"))
    }

    /// The server, or nil when the Status API is off.
    func server(devices: DeviceStore, redis: RedisClient, keys: RedisKeys, storage: StorageKeyring) throws
        -> StatusServer?
    {
        guard enabled else { return nil }
        guard !keyFile.isEmpty else {
            throw SettingsError("PUSHRELAY_STATUS_KEY_FILE is required when PUSHRELAY_STATUS_ENABLED is true")
        }
        guard !apnsTopics.isEmpty else {
            throw SettingsError(
                "PUSHRELAY_STATUS_APNS_TOPICS (the bundle ids Status registrations may name) is required when PUSHRELAY_STATUS_ENABLED is true"
            )
        }
        guard let realm = UUID(uuidString: realmUUID) else {
            throw SettingsError("PUSHRELAY_STATUS_REALM_UUID must be a UUID")
        }
        let text = (try? String(contentsOfFile: keyFile, encoding: .utf8)) ?? ""
        let hex = text.trimmingCharacters(in: .whitespacesAndNewlines)
        guard hex.utf8.count == 64, let bytes = Fingerprint.bytes(fromHex: hex),
            let key = try? Secp256k1.PrivateKey(bytes: bytes)
        else {
            throw SettingsError("PUSHRELAY_STATUS_KEY_FILE must hold a secp256k1 private key as 64 hex digits")
        }
        return try StatusServer(
            key: key, realm: RealmID(realm.uuidString.lowercased()), devices: devices, redis: redis, keys: keys,
            storage: storage, maxTargets: maxTargets, maxRequests: maxRequests, windowSeconds: windowSeconds,
            apnsTopics: apnsTopics)
    }
}

/// The Status push-notification server (seeds/003) over HTTP: registrations kept
/// signed, encrypted and versioned, per (hashed public key, installation), with their
/// preferences; queries for access tokens; notification requests turned into gorush-form
/// notifications on `push.requests`.
struct StatusServer: Sendable {
    let key: Secp256k1.PrivateKey
    let publicKey: Secp256k1.PublicKey
    let realm: RealmID
    let devices: DeviceStore
    let redis: RedisClient
    let keys: RedisKeys
    let storage: StorageKeyring
    let maxTargets: Int
    let maxRequests: Int
    let windowSeconds: Int
    let apnsTopics: Set<String>
    /// Installations kept per public key at most.
    static let maxInstallations = 16
    /// The owner the Status realm is registered to: not a server uuid, so no API key logs in as it.
    static let realmOwner = "status-push-server"
    /// Largest query answer; past it the remaining installations are left out.
    static let maxAnswerBytes = 1 << 20

    init(
        key: Secp256k1.PrivateKey, realm: RealmID, devices: DeviceStore, redis: RedisClient, keys: RedisKeys,
        storage: StorageKeyring, maxTargets: Int, maxRequests: Int = 600, windowSeconds: Int = 60,
        apnsTopics: Set<String> = []
    ) throws {
        self.key = key
        self.publicKey = try key.publicKey()
        self.realm = realm
        self.devices = devices
        self.redis = redis
        self.keys = keys
        self.storage = storage
        self.maxTargets = maxTargets
        self.maxRequests = maxRequests
        self.windowSeconds = windowSeconds
        self.apnsTopics = apnsTopics
    }

    /// `message` in an envelope signed by the server's key.
    func signed(_ message: some SwiftProtobuf.Message, type: StatusEnvelope.MessageType) throws -> [UInt8] {
        try StatusEnvelope.seal(try message.serializedBytes(), type: type, key: key)
    }

    /// A version as the store script compares it: 20 digits, so text order is number order
    /// (Lua numbers are doubles, exact only below 2^53).
    static func versionText(_ version: UInt64) -> String {
        let digits = String(version)
        return String(repeating: "0", count: max(0, 20 - digits.count)) + digits
    }

    /// Each registration its own device (the push account id is a hash of key and
    /// installation): two chat keys on one phone share a token, not a device, so removing
    /// one never removes the other's.
    static func pushAccount(hashedKey: String, installation: String) -> Int64 {
        let digest = StatusCrypto.shake256(Array("\(hashedKey)|\(installation)".utf8))
        var value: Int64 = 0
        for byte in digest.prefix(8) { value = (value << 8) | Int64(byte) }
        return value & Int64.max
    }

    /// Registers the Status realm to its reserved owner; false when another server holds it.
    func reserveRealm(_ realms: RealmDirectory) async throws -> Bool {
        switch try await realms.register(realm.rawValue, to: Self.realmOwner, maxRealms: Int.max) {
        case .registered, .alreadyYours: true
        case .taken, .quotaExceeded: false
        }
    }

    /// A registration's Redis key part for an installation id (any text): its hash.
    static func installationKey(_ installation: String) -> String {
        Fingerprint.hex(Array(StatusCrypto.shake256(Array(installation.utf8)).prefix(16)))
    }

    /// Stores a registration unless its version is not above the stored one (checked
    /// again atomically): `version`, the registration sealed, the device.
    static let storeScript = """
        local stored = redis.call('HGET', KEYS[1], 'version') or '00000000000000000000'
        if string.len(stored) < 20 then stored = string.rep('0', 20 - string.len(stored)) .. stored end
        if stored >= ARGV[1] then return -1 end
        if ARGV[2] ~= '' and redis.call('SISMEMBER', KEYS[2], ARGV[4]) == 0
            and redis.call('SCARD', KEYS[2]) >= tonumber(ARGV[5]) then return -2 end
        local old = redis.call('HGET', KEYS[1], 'device_id') or ''
        if ARGV[2] == '' then
            redis.call('HDEL', KEYS[1], 'registration', 'device_id')
            redis.call('HSET', KEYS[1], 'version', ARGV[1])
            redis.call('SREM', KEYS[2], ARGV[4])
        else
            redis.call('HSET', KEYS[1], 'version', ARGV[1], 'registration', ARGV[2], 'device_id', ARGV[3])
            redis.call('SADD', KEYS[2], ARGV[4])
        end
        return old
        """

    enum Stored {
        case stale
        /// The key holds as many installations as it may.
        case full
        case stored(previousDevice: DeviceID?)
    }

    func storedVersion(hashedKey: String, installation: String) async throws -> UInt64 {
        let reply = try await redis.command(
            "HGET",
            RedisArgument(keys.statusRegistration(key: hashedKey, installation: Self.installationKey(installation))),
            "version")
        return reply.string.flatMap { UInt64($0) } ?? 0
    }

    func store(
        hashedKey: String, installation: String, version: UInt64, registration: StatusRegistration?, device: DeviceID?
    ) async throws -> Stored {
        let part = Self.installationKey(installation)
        var sealed = ""
        if let registration {
            sealed = try storage.seal(
                try registration.serializedBytes() as [UInt8],
                slot: .statusRegistration(key: hashedKey, installation: part))
        }
        let reply = try await redis.command(
            "EVAL", RedisArgument(Self.storeScript), "2",
            RedisArgument(keys.statusRegistration(key: hashedKey, installation: part)),
            RedisArgument(keys.statusInstallations(key: hashedKey)), RedisArgument(Self.versionText(version)),
            RedisArgument(sealed), RedisArgument(device.map { "\($0.rawValue)" } ?? ""), RedisArgument(part),
            RedisArgument(Self.maxInstallations))
        if reply.int == -1 { return .stale }
        if reply.int == -2 { return .full }
        return .stored(previousDevice: reply.string.flatMap { Int64($0) }.map { DeviceID($0) })
    }

    /// The stored registrations of a hashed key: installation part → (registration, device).
    func registrations(hashedKey: String, installation: String? = nil) async throws -> [(
        registration: StatusRegistration, device: DeviceID?
    )] {
        let parts: [String]
        if let installation {
            parts = [Self.installationKey(installation)]
        } else {
            parts = try await redis.command("SMEMBERS", RedisArgument(keys.statusInstallations(key: hashedKey)))
                .array.compactMap(\.string).sorted()
        }
        guard !parts.isEmpty else { return [] }
        let replies = try await redis.pipeline(
            parts.map {
                [
                    "HMGET", RedisArgument(keys.statusRegistration(key: hashedKey, installation: $0)), "registration",
                    "device_id",
                ]
            })
        var found: [(StatusRegistration, DeviceID?)] = []
        for (part, reply) in zip(parts, replies) {
            let fields = reply.array
            guard let sealed = fields.first?.string, !sealed.isEmpty,
                let bytes = try? storage.open(sealed, slot: .statusRegistration(key: hashedKey, installation: part)),
                let registration = try? StatusRegistration(serializedBytes: bytes)
            else { continue }
            let device = fields.count > 1 ? fields[1].string.flatMap { Int64($0) }.map { DeviceID($0) } : nil
            found.append((registration, device))
        }
        return found
    }
}

/// The Status endpoints: protobuf in, protobuf out (`application/x-protobuf`), each body
/// an `ApplicationMetadataMessage`. Answers are signed by the server's key.
extension IngestAPI {
    static let statusServerID = ServerID("status")
    static let maxStatusBody = 256 * 1024

    func addStatusRoutes(to router: Router<IngestContext>) {
        router.get("/status/v1/server") { _, _ in
            guard let status else { throw APIError.statusDisabled }
            return success([
                "public_key": .string(Fingerprint.hex(status.publicKey.compressed)),
                "query_topic_hash": "SHAKE-256 of the 33-byte compressed client key, 64 bytes",
            ])
        }
        router.post("/status/v1/registration") { request, context in
            try await statusRegistration(request, context: context)
        }
        router.post("/status/v1/query") { request, context in try await statusQuery(request, context: context) }
        router.post("/status/v1/notify") { request, context in try await statusNotify(request, context: context) }
    }

    /// Reads a signed message of `type`; a message that is not one, or whose signature
    /// does not recover a key, is discarded with a 400 (no protobuf answer).
    func statusEnvelope(_ request: Request, context: IngestContext, type: StatusEnvelope.MessageType) async throws -> (
        StatusServer, StatusEnvelope
    ) {
        guard let status else { throw APIError.statusDisabled }
        guard try await status.reserveRealm(realms) else {
            context.logger.error("the Status realm belongs to a server: set PUSHRELAY_STATUS_REALM_UUID to a free one")
            throw APIError(
                status: .serviceUnavailable, code: "STATUS_REALM_TAKEN",
                message: "The Status push server is misconfigured here")
        }
        let client = authenticator.clientAddress(request, context: context)
        let nowMs = Wire.nowMillis()
        let window = WindowCounter.window(nowMs: nowMs, seconds: status.windowSeconds)
        let count = try await WindowCounter(redis: status.redis).increment(
            status.keys.statusClient(client, window: window), windowSeconds: status.windowSeconds)
        if count > Int64(status.maxRequests) {
            let retryAfter = WindowCounter.secondsLeft(nowMs: nowMs, seconds: status.windowSeconds)
            throw APIError(
                status: .tooManyRequests, code: "RATE_LIMITED",
                message: "Too many Status requests from this address; retry in \(retryAfter) s",
                headers: [.retryAfter: "\(retryAfter)"])
        }
        var request = request
        let bytes = Array(try await request.collectBody(upTo: Self.maxStatusBody).readableBytesView)
        do {
            return (status, try StatusEnvelope(bytes: bytes, expected: type))
        } catch .malformed {
            throw APIError.badRequest("The body is not an ApplicationMetadataMessage", code: "MALFORMED_MESSAGE")
        } catch .badSignature {
            throw APIError.badRequest(
                "signature: not a recoverable secp256k1 signature of Keccak-256(payload)", code: "BAD_SIGNATURE",
                field: "signature")
        } catch .wrongType(let expected, let got) {
            throw APIError.badRequest(
                "type: \(got) is not \(expected.rawValue) on this endpoint", code: "WRONG_MESSAGE_TYPE", field: "type")
        }
    }

    func statusAnswer(_ message: some SwiftProtobuf.Message, type: StatusEnvelope.MessageType, status: StatusServer)
        throws -> Response
    {
        Self.protobufResponse(try status.signed(message, type: type))
    }

    static func protobufResponse(_ bytes: [UInt8]) -> Response {
        Response(
            status: .ok, headers: [.contentType: "application/x-protobuf"],
            body: .init(byteBuffer: ByteBuffer(bytes: bytes)))
    }

    func statusRegistration(_ request: Request, context: IngestContext) async throws -> Response {
        let (status, envelope) = try await statusEnvelope(
            request, context: context, type: .pushNotificationRegistration)
        var response = StatusRegistrationResponse()
        response.requestID = Data(StatusCrypto.shake256(envelope.payload))
        func refuse(_ error: StatusRegistrationResponse.ErrorType) throws -> Response {
            response.success = false
            response.error = error
            return try statusAnswer(response, type: .pushNotificationRegistrationResponse, status: status)
        }
        // The payload must decrypt under the ECDH key of the signer and the server: a key
        // extracted from a forged signature cannot. Otherwise it is discarded.
        let plaintext: [UInt8]
        do {
            plaintext = try StatusCrypto.decrypt(
                envelope.payload, key: try status.key.sharedSecret(with: envelope.signer))
        } catch {
            throw APIError.badRequest(
                "payload: does not decrypt with the key of the signer and this server; discarded",
                code: "UNDECRYPTABLE", field: "payload")
        }
        guard let registration = try? StatusRegistration(serializedBytes: plaintext) else {
            return try refuse(.malformedMessage)
        }
        let hashedKey = Fingerprint.hex(StatusCrypto.hashedPublicKey(envelope.signer))
        let stored: UInt64
        do {
            stored = try await status.storedVersion(hashedKey: hashedKey, installation: registration.installationID)
        } catch {
            return try refuse(.internalError)
        }
        switch StatusRegistrationRules.check(
            registration, client: envelope.signer, server: status.publicKey, storedVersion: stored)
        {
        case .refused(let error, _):
            return try refuse(error)
        case .unregister(let registration):
            do {
                switch try await status.store(
                    hashedKey: hashedKey, installation: registration.installationID, version: registration.version,
                    registration: nil, device: nil)
                {
                case .stale: return try refuse(.versionMismatch)
                case .full: return try refuse(.malformedMessage)
                case .stored(let previous):
                    if let previous, let device = try await devices.device(previous) {
                        _ = try await devices.delete(device)
                    }
                }
            } catch {
                return try refuse(.internalError)
            }
        case .register(let registration):
            let provider: Provider = registration.tokenType == .apnToken ? .apns : .fcm
            if provider == .apns, !status.apnsTopics.contains(registration.apnTopic) {
                return try refuse(.malformedMessage)
            }
            guard
                let token = try? DeviceToken(
                    provider: provider, value: registration.deviceToken, rules: provider == .apns ? .zulip : .strict)
            else { return try refuse(.malformedMessage) }
            do {
                let (device, created) = try await devices.register(
                    DeviceRegistration(
                        realmUUID: status.realm, userID: nil, token: token,
                        appID: provider == .apns ? registration.apnTopic : nil,
                        pushAccountID: StatusServer.pushAccount(
                            hashedKey: hashedKey, installation: registration.installationID),
                        pushKey: nil))
                let outcome = try await status.store(
                    hashedKey: hashedKey, installation: registration.installationID, version: registration.version,
                    registration: registration, device: device)
                if case .stored(let previous) = outcome {
                    if let previous, previous != device, let old = try await devices.device(previous) {
                        _ = try await devices.delete(old)
                    }
                } else if created, let orphan = try await devices.device(device) {
                    // Refused after all (a newer version came first, or too many installations).
                    _ = try await devices.delete(orphan)
                }
                switch outcome {
                case .stale: return try refuse(.versionMismatch)
                case .full: return try refuse(.malformedMessage)
                case .stored: break
                }
            } catch {
                return try refuse(.internalError)
            }
        }
        response.success = true
        response.error = .unknownErrorType
        return try statusAnswer(response, type: .pushNotificationRegistrationResponse, status: status)
    }

    func statusQuery(_ request: Request, context: IngestContext) async throws -> Response {
        let (status, envelope) = try await statusEnvelope(request, context: context, type: .pushNotificationQuery)
        guard let query = try? StatusQuery(serializedBytes: envelope.payload) else {
            throw APIError.badRequest("payload: not a PushNotificationQuery", code: "MALFORMED_MESSAGE")
        }
        guard query.publicKeys.count <= status.maxTargets else {
            throw APIError.badRequest(
                "public_keys: at most \(status.maxTargets)", code: "TOO_MANY_KEYS", field: "public_keys")
        }
        var response = StatusQueryResponse()
        response.messageID = Data(envelope.messageID)
        response.success = !query.publicKeys.isEmpty
        var seen: Set<Data> = []
        var answerBytes = 0
        for hashed in query.publicKeys where hashed.count == Shake256.statusLength && seen.insert(hashed).inserted {
            let hashedKey = Fingerprint.hex(Array(hashed))
            for (registration, _) in try await status.registrations(hashedKey: hashedKey) {
                answerBytes += registration.allowedKeyList.reduce(0) { $0 + $1.count } + registration.grant.count + 256
                guard answerBytes <= StatusServer.maxAnswerBytes else { break }
                var info = StatusQueryInfo()
                info.publicKey = hashed
                info.installationID = registration.installationID
                info.grant = registration.grant
                info.version = registration.version
                info.serverPublicKey = Data(status.publicKey.compressed)
                // A device that filters senders hands its token only to its contacts, encrypted.
                if registration.allowFromContactsOnly {
                    info.allowedKeyList = registration.allowedKeyList
                } else {
                    info.accessToken = registration.accessToken
                }
                response.info.append(info)
            }
        }
        return try statusAnswer(response, type: .pushNotificationQueryResponse, status: status)
    }

    func statusNotify(_ request: Request, context: IngestContext) async throws -> Response {
        let (status, envelope) = try await statusEnvelope(request, context: context, type: .pushNotificationRequest)
        guard let notificationRequest = try? StatusNotificationRequest(serializedBytes: envelope.payload) else {
            throw APIError.badRequest("payload: not a PushNotificationRequest", code: "MALFORMED_MESSAGE")
        }
        guard !notificationRequest.messageID.isEmpty else {
            throw APIError.badRequest("message_id: is required", code: "MALFORMED_MESSAGE", field: "message_id")
        }
        guard notificationRequest.requests.count <= status.maxTargets else {
            throw APIError.badRequest(
                "requests: at most \(status.maxTargets) targets", code: "TOO_MANY_TARGETS", field: "requests")
        }
        guard
            notificationRequest.requests.allSatisfy({
                $0.installationID.utf8.count <= StatusRegistrationRules.maxInstallationBytes
                    && $0.publicKey.count <= Shake256.statusLength && $0.chatID.count <= 1024
                    && $0.author.count <= 1024 && $0.accessToken.utf8.count <= 64
            }), notificationRequest.messageID.count <= 1024
        else {
            throw APIError.badRequest(
                "requests: a field is longer than any valid one", code: "MALFORMED_MESSAGE", field: "requests")
        }
        // A message handled once: a repeat gets the first answer.
        let seenKey = RedisArgument(status.keys.statusRequest(Fingerprint.hex(envelope.messageID)))
        // A short claim: a crash before the answer is stored frees the message within a minute.
        let claim = try await status.redis.command("SET", seenKey, "pending", "NX", "EX", "60")
        if claim == .null {
            if let earlier = try await status.redis.command("GET", seenKey).string, earlier != "pending",
                let bytes = Data(base64Encoded: earlier)
            {
                return Self.protobufResponse(Array(bytes))
            }
            throw APIError(
                status: .conflict, code: "DUPLICATE_REQUEST", message: "This message was handled already")
        }
        var response = StatusNotificationResponse()
        response.messageID = notificationRequest.messageID
        let acceptedAt = Wire.nowMillis()
        var records: [PushRequestRecord] = []
        var filtered: [DeliveryRecord] = []
        do {
            for target in notificationRequest.requests where target.type != .unknownPushNotificationType {
                var report = StatusNotificationReport()
                report.publicKey = target.publicKey
                report.installationID = target.installationID
                defer { response.reports.append(report) }
                guard target.publicKey.count == Shake256.statusLength,
                    let (registration, device) = try await status.registrations(
                        hashedKey: Fingerprint.hex(Array(target.publicKey)), installation: target.installationID
                    ).first, let device
                else {
                    report.error = .notRegistered
                    continue
                }
                guard Self.constantTimeEqual(Array(registration.accessToken.utf8), Array(target.accessToken.utf8))
                else {
                    report.error = .wrongToken
                    continue
                }
                // Accepted: a filtered one too is reported as success, so a sender learns
                // nothing of the receiver's preferences.
                report.success = true
                let notificationID = NotificationID(UUID().uuidString.lowercased())
                if let reason = StatusPreferences.filterReason(target, for: registration) {
                    filtered.append(
                        DeliveryRecord(
                            notificationID: notificationID, realmUUID: status.realm, deviceID: device,
                            provider: registration.tokenType == .apnToken ? .apns : .fcm, outcome: .filtered,
                            reason: reason, attempts: 0, acceptedAtMs: acceptedAt, completedAtMs: Wire.nowMillis()))
                    continue
                }
                let notification = Self.statusGorushNotification(
                    target, registration: registration, messageID: Array(notificationRequest.messageID))
                let sealed = try pipelineKeys.seal(
                    notification.sealedForm,
                    binding: .payload(notificationID: notificationID, realmUUID: status.realm, userID: nil))
                records.append(
                    PushRequestRecord(
                        notificationID: notificationID, serverUUID: Self.statusServerID, realmUUID: status.realm,
                        acceptedAtMs: acceptedAt, request: .gorush(deviceIDs: [device], sealedPayload: sealed)))
            }
            // All or nothing: one notification per target, never a second on a retry.
            try await acceptor.publish(records, outcomes: filtered)
        } catch {
            // Nothing is remembered: the client may send the same message again.
            _ = try? await status.redis.command("DEL", seenKey)
            throw error
        }
        let bytes = try status.signed(response, type: .pushNotificationResponse)
        // A repeat gets this answer for 7 days; a large one is not kept, and a repeat of it
        // is refused (409) instead of answered.
        let stored = bytes.count <= 16 * 1024 ? Data(bytes).base64EncodedString() : "answered"
        _ = try? await status.redis.command("SET", seenKey, RedisArgument(stored), "EX", RedisArgument(7 * 86_400))
        return Self.protobufResponse(bytes)
    }

    /// What status-go sends gorush for one target: a fixed text per type, the APN topic,
    /// and the data as `0x` hex (`encryptedMessage`, `chatId`, `publicKey`), with the
    /// spec's names beside them (`chat_id`, `message`, `installation_ids`, `message_id`).
    static func statusGorushNotification(
        _ target: StatusNotification, registration: StatusRegistration, messageID: [UInt8]
    ) -> GorushNotification {
        let platform: GorushNotification.Platform = registration.tokenType == .apnToken ? .ios : .android
        var content: [String: JSONValue] = [
            "message": .string(StatusPreferences.text(target.type)),
            "data": [
                "encryptedMessage": .string(StatusCrypto.hex0x(Array(target.message))),
                "chatId": .string(StatusCrypto.hex0x(Array(target.chatID))),
                "publicKey": .string(StatusCrypto.hex0x(Array(target.publicKey))),
                "chat_id": .string(StatusCrypto.hex0x(Array(target.chatID))),
                "message": .string(StatusCrypto.hex0x(Array(target.message))),
                "message_id": .string(StatusCrypto.hex0x(messageID)),
                "installation_ids": [.string(target.installationID)],
                "type": .int(Int64(target.type.rawValue)),
            ],
        ]
        if platform == .ios { content["topic"] = .string(registration.apnTopic) }
        return GorushNotification(platform: platform, content: content)
    }

    static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        var difference: UInt8 = 0
        for (x, y) in zip(a, b) { difference |= x ^ y }
        return difference == 0
    }
}

extension APIError {
    static let statusDisabled = APIError(
        status: .notFound, code: "STATUS_DISABLED",
        message: "The Status push server is not enabled here (PUSHRELAY_STATUS_ENABLED)")
}
