import Crypto
import DevStack
import FakeProviders
import Foundation
import Kafka
import PushModels
import Testing

/// `token_id` as Zulip 12 computes it: standard base64 of the first 8 bytes of the
/// SHA-256 of the token's UTF-8 text (docs/api/zulip.md §4.1).
private func zulipTokenID(_ token: String) -> String {
    Data(Array(SHA256.hash(data: Data(token.utf8))).prefix(8)).base64EncodedString()
}

@Suite struct ZulipTokenIDTests {
    @Test func tokenIDMatchesZulipsVectors() {
        #expect(zulipTokenID("c0ffee") == "+wKIhyAx/Eg=", "the example of Zulip's register-remote-push-device page")
        #expect(zulipTokenID("C0FFEE") == "jS5/TZMf7/8=", "the token's text is hashed, so case matters")
        #expect(zulipTokenID("android-tokenaz") == "iGFeKNj3ngQ=")
        #expect(zulipTokenID("apple-tokenaz") == "CkRAMvI0fQc=")
    }
}

/// A self-hosted Zulip server as its push-bouncer code talks to the relay
/// (docs/api/zulip.md §1): Basic auth with its uuid and key, its
/// `ZulipServer/<version>` user agent, form bodies where Zulip sends a dict and JSON
/// where it sends JSON. Each test makes its own, so tests are independent.
private struct ZulipServer {
    enum Credentials {
        case own
        case none
        case basic(String, String)
    }

    let stack: Stack
    let uuid: String
    let key: String
    /// What follows `ZulipServer/` in the user agent; 11.x servers speak the older E2EE dialect.
    let version: String
    /// Unique per server: Zulip's bouncer refuses a new server with another's hostname.
    let hostname: String

    init(
        _ stack: Stack, version: String = "12.0", uuid: String = UUID().uuidString.lowercased(), key: String = newKey()
    ) {
        self.stack = stack
        self.version = version
        self.uuid = uuid
        self.key = key
        self.hostname = "zulip-\(UUID().uuidString.prefix(8).lowercased()).example.org"
    }

    static func newKey() -> String {
        String((0..<64).map { _ in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789".randomElement()! })
    }

    /// `manage.py register_server`: `server/register`, then the analytics pair with `realms`.
    static func registered(_ stack: Stack, version: String = "12.0", realms: [String]) async throws -> ZulipServer {
        let server = ZulipServer(stack, version: version)
        let reply = try await server.register()
        guard reply.status == 200 else { throw StackError("server/register: \(reply.status) \(reply.text)") }
        _ = try await server.get("server/analytics/status")
        let upload = try await server.uploadAnalytics(
            realms: realms.enumerated().map { server.realm($1, id: Int64($0) + 2) })
        guard upload.status == 200 else { throw StackError("server/analytics: \(upload.status) \(upload.text)") }
        return server
    }

    var realmURL: String { "https://\(hostname)" }

    func url(_ endpoint: String) -> String { "\(stack.ingestURL)/api/v1/remotes/\(endpoint)" }

    private func basic(_ credentials: Credentials) -> (String, String)? {
        switch credentials {
        case .own: (uuid, key)
        case .none: nil
        case .basic(let user, let password): (user, password)
        }
    }

    private var headers: [(String, String)] { [("User-Agent", "ZulipServer/\(version)")] }

    /// `server/register` as the command sends it: a bare requests session, no Basic auth.
    func register(key: String? = nil) async throws -> HTTP.Reply {
        try await HTTP.send(
            "POST", url("server/register"),
            body: Self.form([
                ("zulip_org_id", uuid), ("zulip_org_key", key ?? self.key), ("hostname", hostname),
                ("contact_email", "admin@\(hostname)"),
            ]), contentType: "application/x-www-form-urlencoded",
            headers: [("User-Agent", "python-requests/2.32.3")])
    }

    func post(_ endpoint: String, form fields: [(String, String)], as credentials: Credentials = .own) async throws
        -> HTTP.Reply
    {
        try await HTTP.send(
            "POST", url(endpoint), body: Self.form(fields), contentType: "application/x-www-form-urlencoded",
            auth: basic(credentials), headers: headers)
    }

    func post(_ endpoint: String, json: JSONValue, as credentials: Credentials = .own) async throws -> HTTP.Reply {
        try await HTTP.send("POST", url(endpoint), json: json, auth: basic(credentials), headers: headers)
    }

    func get(_ endpoint: String, as credentials: Credentials = .own) async throws -> HTTP.Reply {
        try await HTTP.send("GET", url(endpoint), body: nil, auth: basic(credentials), headers: headers)
    }

    /// `server/analytics`: a form whose every value is itself a JSON text (§3.3).
    func uploadAnalytics(
        realms: [JSONValue], realmCounts: [JSONValue] = [], installationCounts: [JSONValue] = [],
        auditLogRows: [JSONValue] = []
    ) async throws -> HTTP.Reply {
        func text(_ value: JSONValue) -> String { String(decoding: Wire.canonical(value), as: UTF8.self) }
        return try await post(
            "server/analytics",
            form: [
                ("realm_counts", text(.array(realmCounts))), ("installation_counts", text(.array(installationCounts))),
                ("realmauditlog_rows", text(.array(auditLogRows))), ("realms", text(.array(realms))),
                ("version", text(.string(version))), ("merge_base", text("a1b2c3d4e5f6")),
                ("api_feature_level", text(version.hasPrefix("11") ? 420 : 468)),
            ])
    }

    /// A realm object of the upload, every field Zulip sends (§3.3).
    func realm(_ realmUUID: String, id: Int64, deactivated: Bool = false, systemBot: Bool = false) -> JSONValue {
        [
            "id": .int(id), "host": .string(systemBot ? "zulipinternal.\(hostname)" : hostname),
            "url": .string(systemBot ? "https://zulipinternal.\(hostname)" : realmURL),
            "name": .string(systemBot ? "System bot realm" : "Example"), "org_type": .int(systemBot ? 0 : 10),
            "date_created": .double(1_700_000_000.5), "deactivated": .bool(deactivated),
            "is_system_bot_realm": .bool(systemBot), "authentication_methods": ["Email": true, "GitHub": false],
            "uuid": .string(realmUUID), "uuid_owner_secret": .string("zuliprealm_\(UUID().uuidString)"),
        ]
    }

    static func form(_ fields: [(String, String)]) -> [UInt8] { formURLEncoded(fields) }

    // MARK: Legacy payloads, as Zulip's server builds them (§5.4)

    func basePayload(userID: Int64) -> [String: JSONValue] {
        [
            "server": .string(hostname), "realm_id": 2, "realm_name": "Example", "realm_uri": .string(realmURL),
            "realm_url": .string(realmURL), "user_id": .int(userID),
        ]
    }

    /// A channel message: (`apns_payload`, `gcm_payload`).
    func messagePayloads(userID: Int64, messageID: Int64, content: String) -> (apns: JSONValue, gcm: JSONValue) {
        let sender: [String: JSONValue] = [
            "sender_id": 6, "sender_email": .string("aaron@\(hostname)"), "recipient_type": "stream",
            "stream": "Denmark", "stream_id": 10, "topic": "lunch",
        ]
        var zulip = basePayload(userID: userID).merging(sender) { _, new in new }
        zulip["message_ids"] = [.int(messageID)]
        zulip["time"] = 1_754_385_395
        var gcm = basePayload(userID: userID).merging(sender) { _, new in new }
        gcm.merge([
            "event": "message", "zulip_message_id": .int(messageID), "time": 1_754_385_395, "content": .string(content),
            "content_truncated": false, "sender_full_name": "Aaron",
            "sender_avatar_url": "https://secure.gravatar.com/avatar/x?d=identicon&version=1",
        ]) { _, new in new }
        let apns: JSONValue = [
            "alert": ["title": "#Denmark > lunch", "subtitle": "Aaron:", "body": .string(content)], "sound": "default",
            "badge": 0, "custom": ["zulip": .object(zulip)],
        ]
        return (apns, .object(gcm))
    }

    func removePayloads(userID: Int64, messageIDs: String) -> (apns: JSONValue, gcm: JSONValue) {
        var fields = basePayload(userID: userID)
        fields["event"] = "remove"
        fields["zulip_message_ids"] = .string(messageIDs)
        return (["badge": 0, "custom": ["zulip": .object(fields)]], .object(fields))
    }
}

extension HTTP.Reply {
    fileprivate var text: String { String(decoding: body, as: UTF8.self) }
}

/// Zulip's server reads `result` and indexes `msg` in every answer (§1).
private func expectSuccess(_ reply: HTTP.Reply, _ what: String, sourceLocation: SourceLocation = #_sourceLocation) {
    #expect(reply.status == 200, "\(what): \(reply.status) \(reply.text)", sourceLocation: sourceLocation)
    #expect(reply.json["result"] == "success", "\(what): \(reply.text)", sourceLocation: sourceLocation)
    #expect(reply.json["msg"] == "", "\(what): \(reply.text)", sourceLocation: sourceLocation)
}

private func expectError(
    _ reply: HTTP.Reply, status: Int, code: String?, msg: String? = nil, _ what: String,
    sourceLocation: SourceLocation = #_sourceLocation
) {
    #expect(reply.status == status, "\(what): \(reply.status) \(reply.text)", sourceLocation: sourceLocation)
    #expect(reply.json["result"] == "error", "\(what): \(reply.text)", sourceLocation: sourceLocation)
    if let code { #expect(reply.code == code, "\(what): \(reply.text)", sourceLocation: sourceLocation) }
    if let msg {
        #expect(reply.json["msg"]?.stringValue == msg, "\(what): \(reply.text)", sourceLocation: sourceLocation)
    } else {
        #expect(
            reply.json["msg"]?.stringValue?.isEmpty == false, "\(what): \(reply.text)", sourceLocation: sourceLocation)
    }
}

/// The FCM data Zulip's bouncer makes of a `gcm_payload`: every value as text (ints in decimal).
private func fcmData(_ gcm: JSONValue) -> [String: JSONValue] {
    (gcm.objectValue ?? [:]).mapValues { value in
        switch value {
        case .string: value
        case .int(let i): .string(String(i))
        default: .string("\(value)")
        }
    }
}

private let pushable: JSONValue = ["can_push": true, "expected_end_timestamp": .null]
private let appID = "org.zulip.Zulip"

private func ciphertext() -> String {
    Data((0..<80).map { _ in UInt8.random(in: 0...255) }).base64EncodedString()
}

extension StackTests {
    /// Every call a self-hosted Zulip server makes to its push bouncer, sent as Zulip's
    /// server sends it and judged by the fields that server reads (docs/api/zulip.md).
    @Suite struct ZulipCompatibilityTests {
        // MARK: Server housekeeping

        @Test func registerServerAndAnalyticsAsManagePyDoes() async throws {
            let stack = try await Stack.get()
            let server = ZulipServer(stack)
            let created = try await server.register()
            expectSuccess(created, "server/register")
            #expect(created.json["created"] == true)
            let again = try await server.register()
            expectSuccess(again, "server/register again")
            #expect(again.json["created"] == false, "re-registering with the same key updates, it does not create")

            let status = try await server.get("server/analytics/status")
            expectSuccess(status, "analytics/status")
            for field in ["last_realm_count_id", "last_installation_count_id", "last_realmauditlog_id"] {
                #expect(status.json[field] == 0, "\(field) of a new server: \(status.text)")
            }

            let active = UUID().uuidString.lowercased()
            let deactivated = UUID().uuidString.lowercased()
            let internalRealm = UUID().uuidString.lowercased()
            let realms = [
                server.realm(internalRealm, id: 1, systemBot: true), server.realm(active, id: 2),
                server.realm(deactivated, id: 3, deactivated: true),
            ]
            let upload = try await server.uploadAnalytics(realms: realms)
            expectSuccess(upload, "analytics upload")
            #expect(
                upload.json["realms"] == .object([active: pushable, deactivated: pushable, internalRealm: pushable]),
                "one entry for every uploaded realm, deactivated and system-bot ones included: \(upload.text)")

            let counts = try await server.uploadAnalytics(
                realms: realms,
                realmCounts: [5, 9].map { id in
                    [
                        "property": "messages_sent:is_bot:hour", "realm": 2, "id": .int(id),
                        "end_time": .double(1_754_380_800.0),
                        "subgroup": "false", "value": 3,
                    ]
                },
                installationCounts: [
                    [
                        "property": "active_users_audit:is_bot:day", "id": 3, "end_time": .double(1_754_352_000.0),
                        "subgroup": .null, "value": 12,
                    ]
                ],
                auditLogRows: [
                    [
                        "id": 12, "realm": 2, "event_time": .double(1_754_300_000.25), "backfilled": false,
                        "extra_data": "{}", "event_type": 101,
                    ]
                ])
            expectSuccess(counts, "analytics upload with rows")
            #expect(counts.json["realms"]?[active] == pushable)
            let after = try await server.get("server/analytics/status")
            expectSuccess(after, "analytics/status after rows")
            #expect(after.json["last_realm_count_id"] == 9, "\(after.text)")
            #expect(after.json["last_installation_count_id"] == 3, "\(after.text)")
            #expect(after.json["last_realmauditlog_id"] == 12, "\(after.text)")
        }

        @Test func registeringAKnownServerWithAnotherKeyIsInvalidZulipServer() async throws {
            let stack = try await Stack.get()
            let server = ZulipServer(stack)
            expectSuccess(try await server.register(), "server/register")
            let other = try await server.register(key: ZulipServer.newKey())
            expectError(other, status: 400, code: "INVALID_ZULIP_SERVER", "server/register with the wrong key")
            expectSuccess(try await server.get("server/analytics/status"), "the real key still works")
        }

        @Test func badCredentialsAreUnauthorizedEverywhere() async throws {
            let stack = try await Stack.get()
            let realm = UUID().uuidString.lowercased()
            let server = try await ZulipServer.registered(stack, realms: [realm])
            let attempts: [(String, ZulipServer.Credentials)] = [
                ("wrong key", .basic(server.uuid, ZulipServer.newKey())),
                ("unknown uuid", .basic(UUID().uuidString.lowercased(), server.key)), ("no header", .none),
            ]
            for (what, credentials) in attempts {
                let replies = [
                    ("analytics/status", try await server.get("server/analytics/status", as: credentials)),
                    (
                        "push/register",
                        try await server.post(
                            "push/register",
                            form: [
                                ("server_uuid", server.uuid), ("user_id", "5"), ("token", RealmClient.fcmToken()),
                                ("token_kind", "2"),
                            ], as: credentials)
                    ),
                    (
                        "push/notify",
                        try await server.post(
                            "push/notify",
                            json: [
                                "user_id": 5, "realm_uuid": .string(realm), "apns_payload": [:], "gcm_payload": [:],
                                "gcm_options": [:], "android_devices": [], "apple_devices": [],
                            ], as: credentials)
                    ),
                    ("server/deactivate", try await server.post("server/deactivate", json: [:], as: credentials)),
                ]
                for (endpoint, reply) in replies {
                    expectError(reply, status: 401, code: "UNAUTHORIZED", "\(endpoint), \(what)")
                    #expect(
                        reply.headers.contains { $0.0.lowercased() == "www-authenticate" },
                        "\(endpoint), \(what): WWW-Authenticate")
                }
            }
            expectSuccess(
                try await server.get("server/analytics/status"), "the server is untouched by the failed deactivations")
        }

        @Test func aRealmBelongsToTheServerThatUploadedItFirst() async throws {
            let stack = try await Stack.get()
            let realm = UUID().uuidString.lowercased()
            let owner = try await ZulipServer.registered(stack, realms: [realm])
            let other = try await ZulipServer.registered(stack, realms: [])

            let duplicate = try await other.uploadAnalytics(realms: [other.realm(realm, id: 2)])
            expectError(
                duplicate, status: 400, code: "BAD_REQUEST", msg: "Duplicate registration detected.",
                "upload of another's realm")

            let sealer = RealmClient(stack: stack)
            let token = RealmClient.fcmToken()
            func e2eeRegister(_ server: ZulipServer, realm: String) async throws -> HTTP.Reply {
                try await server.post(
                    "push/e2ee/register",
                    form: [
                        ("realm_uuid", realm), ("token_id", zulipTokenID(token)),
                        (
                            "encrypted_push_registration",
                            try sealer.sealedRegistration(kind: "fcm", token: token, appID: nil)
                        ),
                        ("bouncer_public_key", stack.bouncerPublicKey),
                    ])
            }
            expectError(
                try await e2eeRegister(other, realm: realm), status: 403, code: "REMOTE_REALM_SERVER_MISMATCH_ERROR",
                "e2ee/register for another server's realm")
            expectError(
                try await e2eeRegister(other, realm: UUID().uuidString.lowercased()), status: 403,
                code: "MISSING_REMOTE_REALM",
                "e2ee/register for a realm never uploaded")
            let notify = try await other.post(
                "push/e2ee/notify",
                json: [
                    "realm_uuid": .string(realm),
                    "push_requests": [
                        [
                            "token_id": .string(zulipTokenID(token)), "fcm_priority": "high",
                            "payload": ["push_key_id": 1, "encrypted_data": .string(ciphertext())],
                        ]
                    ],
                ])
            expectError(
                notify, status: 403, code: "REMOTE_REALM_SERVER_MISMATCH_ERROR",
                "e2ee/notify for another server's realm")
            let legacy = try await other.post(
                "push/register",
                form: [
                    ("server_uuid", other.uuid), ("user_uuid", UUID().uuidString.lowercased()), ("realm_uuid", realm),
                    ("user_id", "5"), ("token", token), ("token_kind", "2"),
                ])
            expectError(
                legacy, status: 403, code: "REMOTE_REALM_SERVER_MISMATCH_ERROR",
                "push/register for another server's realm")
            expectSuccess(try await e2eeRegister(owner, realm: realm), "the owner registers in its realm")
        }

        @Test func deactivationReachesEveryIngestAtOnce() async throws {
            let stack = try await Stack.get()
            let server = try await ZulipServer.registered(stack, realms: [UUID().uuidString.lowercased()])
            let second = try await stack.launchExtraIngest([:], name: "zulip-second")
            func status(at base: String) async throws -> HTTP.Reply {
                try await HTTP.send(
                    "GET", "\(base)/api/v1/remotes/server/analytics/status", body: nil, auth: (server.uuid, server.key),
                    headers: [("User-Agent", "ZulipServer/12.0")])
            }
            // The second instance has verified (and cached) the key.
            #expect(try await status(at: second.api).status == 200)
            expectSuccess(try await server.post("server/deactivate", json: [:]), "server/deactivate")
            let after = try await status(at: second.api)
            #expect(after.status == 401)
            #expect(after.code == "UNAUTHORIZED")
            #expect(after.json["msg"]?.stringValue?.contains("deactivated") == true)
        }

        @Test func deactivatedServerIsRefusedAndKeepsItsRealms() async throws {
            let stack = try await Stack.get()
            let realm = UUID().uuidString.lowercased()
            let server = try await ZulipServer.registered(stack, realms: [realm])
            let token = RealmClient.fcmToken()
            expectSuccess(
                try await server.post(
                    "push/register",
                    form: [
                        ("server_uuid", server.uuid), ("realm_uuid", realm), ("user_id", "5"), ("token", token),
                        ("token_kind", "2"),
                    ]), "push/register")

            expectSuccess(try await server.post("server/deactivate", json: [:]), "server/deactivate")

            let replies = [
                ("analytics/status", try await server.get("server/analytics/status")),
                ("analytics", try await server.uploadAnalytics(realms: [server.realm(realm, id: 2)])),
                (
                    "push/notify",
                    try await server.post(
                        "push/notify",
                        json: [
                            "user_id": 5, "realm_uuid": .string(realm), "apns_payload": [:],
                            "gcm_payload": server.removePayloads(userID: 5, messageIDs: "1").gcm,
                            "gcm_options": ["priority": "normal"], "android_devices": [.string(token)],
                            "apple_devices": [],
                        ])
                ),
                (
                    "push/unregister/all",
                    try await server.post(
                        "push/unregister/all", form: [("server_uuid", server.uuid), ("user_id", "5")])
                ),
                ("server/deactivate again", try await server.post("server/deactivate", json: [:])),
            ]
            for (endpoint, reply) in replies {
                expectError(reply, status: 401, code: "UNAUTHORIZED", "\(endpoint) after deactivation")
            }
            expectError(
                try await server.register(), status: 401, code: "REALM_DEACTIVATED",
                "server/register after deactivation")

            // Nothing it owned is deleted: its realm is still its own.
            let other = try await ZulipServer.registered(stack, realms: [])
            expectError(
                try await other.uploadAnalytics(realms: [other.realm(realm, id: 2)]), status: 400, code: "BAD_REQUEST",
                msg: "Duplicate registration detected.", "another server uploading the deactivated server's realm")
        }

        // MARK: E2EE

        @Test func e2eeTokenIDDialectOfZulip12() async throws {
            let stack = try await Stack.get()
            let realm = UUID().uuidString.lowercased()
            let server = try await ZulipServer.registered(stack, realms: [realm])
            let sealer = RealmClient(stack: stack)
            let apnsToken = RealmClient.apnsToken()
            let fcmToken = RealmClient.fcmToken()

            func register(kind: String, token: String, tokenID: String) async throws -> HTTP.Reply {
                try await server.post(
                    "push/e2ee/register",
                    form: [
                        ("realm_uuid", realm), ("token_id", tokenID),
                        (
                            "encrypted_push_registration",
                            try sealer.sealedRegistration(kind: kind, token: token, appID: kind == "apns" ? appID : nil)
                        ),
                        ("bouncer_public_key", stack.bouncerPublicKey),
                    ])
            }
            let apnsForm: [(String, String)] = [
                ("realm_uuid", realm), ("token_id", zulipTokenID(apnsToken)),
                (
                    "encrypted_push_registration",
                    try sealer.sealedRegistration(kind: "apns", token: apnsToken, appID: appID)
                ),
                ("bouncer_public_key", stack.bouncerPublicKey),
            ]
            expectSuccess(try await server.post("push/e2ee/register", form: apnsForm), "e2ee/register APNs")
            expectSuccess(try await server.post("push/e2ee/register", form: apnsForm), "the same registration again")
            expectSuccess(
                try await register(kind: "fcm", token: fcmToken, tokenID: zulipTokenID(fcmToken)), "e2ee/register FCM")
            for wrong in [zulipTokenID(RealmClient.fcmToken()), "192057", zulipTokenID(fcmToken.uppercased())] {
                expectError(
                    try await register(kind: "fcm", token: fcmToken, tokenID: wrong), status: 400, code: "BAD_REQUEST",
                    msg: "Invalid encrypted_push_registration", "token_id \(wrong) that is not the sealed token's")
            }

            let unknown = zulipTokenID(RealmClient.fcmToken())
            let apnsPayload: JSONValue = [
                "push_key_id": 3_735_928_559, "encrypted_data": .string(ciphertext()),
                "aps": ["mutable-content": 1, "alert": ["title": "New notification"]],
            ]
            let fcmCiphertext = ciphertext()
            let reply = try await server.post(
                "push/e2ee/notify",
                json: [
                    "realm_uuid": .string(realm),
                    "push_requests": [
                        [
                            "token_id": .string(zulipTokenID(apnsToken)),
                            "http_headers": ["apns_priority": 10, "apns_push_type": "alert"], "payload": apnsPayload,
                        ],
                        [
                            "token_id": .string(zulipTokenID(fcmToken)), "fcm_priority": "high",
                            "payload": ["push_key_id": 7, "encrypted_data": .string(fcmCiphertext)],
                        ],
                        [
                            "token_id": .string(unknown), "fcm_priority": "high",
                            "payload": ["push_key_id": 7, "encrypted_data": .string(fcmCiphertext)],
                        ],
                    ],
                ])
            expectSuccess(reply, "e2ee/notify")
            #expect(reply.json["apple_successfully_sent_count"] == 1, "\(reply.text)")
            #expect(reply.json["android_successfully_sent_count"] == 1, "\(reply.text)")
            #expect(reply.json["delete_token_ids"] == [.string(unknown)], "\(reply.text)")
            #expect(reply.json["realm_push_status"] == pushable, "\(reply.text)")

            let apns = try #require(
                try await stack.waitForPushes("apns") { $0.contains { $0.token == apnsToken } }.first {
                    $0.token == apnsToken
                })
            #expect(apns.body == apnsPayload, "the payload travels unchanged")
            #expect(apns.headers["apns-priority"] == "10")
            #expect(apns.headers["apns-push-type"] == "alert")
            #expect(apns.headers["apns-topic"] == appID)
            let fcm = try #require(
                try await stack.waitForPushes("fcm") { $0.contains { $0.token == fcmToken } }.first {
                    $0.token == fcmToken
                })
            #expect(fcm.body == ["push_key_id": "7", "encrypted_data": .string(fcmCiphertext)])
            #expect(fcm.headers["android.priority"]?.lowercased() == "high")
        }

        @Test func e2eePushAccountIDDialectOfZulip11() async throws {
            let stack = try await Stack.get()
            let realm = UUID().uuidString.lowercased()
            let server = try await ZulipServer.registered(stack, version: "11.0", realms: [realm])
            let sealer = RealmClient(stack: stack)
            let apnsToken = RealmClient.apnsToken()
            let fcmToken = RealmClient.fcmToken()

            func register(kind: String, token: String, pushAccountID: Int64) async throws -> HTTP.Reply {
                try await server.post(
                    "push/e2ee/register",
                    form: [
                        ("realm_uuid", realm), ("push_account_id", String(pushAccountID)),
                        (
                            "encrypted_push_registration",
                            try sealer.sealedRegistration(kind: kind, token: token, appID: kind == "apns" ? appID : nil)
                        ),
                        ("bouncer_public_key", stack.bouncerPublicKey),
                    ])
            }
            let first = try await register(kind: "apns", token: apnsToken, pushAccountID: 10)
            expectSuccess(first, "e2ee/register APNs")
            let apnsDevice = try #require(first.json["device_id"]?.intValue, "device_id is an integer: \(first.text)")
            #expect(
                try await register(kind: "apns", token: apnsToken, pushAccountID: 10).json["device_id"]?.intValue
                    == apnsDevice)
            let second = try await register(kind: "fcm", token: fcmToken, pushAccountID: 20)
            expectSuccess(second, "e2ee/register FCM")
            let fcmDevice = try #require(second.json["device_id"]?.intValue, "device_id is an integer: \(second.text)")

            let unknown: Int64 = 987_654_321_987
            let apnsPayload: JSONValue = [
                "push_account_id": 10, "encrypted_data": .string(ciphertext()),
                "aps": ["mutable-content": 1, "alert": ["title": "New notification"]],
            ]
            let fcmCiphertext = ciphertext()
            let reply = try await server.post(
                "push/e2ee/notify",
                json: [
                    "realm_uuid": .string(realm),
                    "push_requests": [
                        [
                            "device_id": .int(apnsDevice),
                            "http_headers": ["apns_priority": 10, "apns_push_type": "alert"],
                            "payload": apnsPayload,
                        ],
                        [
                            "device_id": .int(fcmDevice), "fcm_priority": "high",
                            "payload": ["push_account_id": 20, "encrypted_data": .string(fcmCiphertext)],
                        ],
                        [
                            "device_id": .int(unknown), "fcm_priority": "high",
                            "payload": ["push_account_id": 20, "encrypted_data": .string(fcmCiphertext)],
                        ],
                    ],
                ])
            expectSuccess(reply, "e2ee/notify")
            #expect(reply.json["apple_successfully_sent_count"] == 1, "\(reply.text)")
            #expect(reply.json["android_successfully_sent_count"] == 1, "\(reply.text)")
            #expect(reply.json["delete_device_ids"] == [.int(unknown)], "\(reply.text)")
            #expect(reply.json["realm_push_status"] == pushable, "\(reply.text)")

            let apns = try #require(
                try await stack.waitForPushes("apns") { $0.contains { $0.token == apnsToken } }.first {
                    $0.token == apnsToken
                })
            #expect(apns.body == apnsPayload)
            #expect(apns.headers["apns-topic"] == appID)
            let fcm = try #require(
                try await stack.waitForPushes("fcm") { $0.contains { $0.token == fcmToken } }.first {
                    $0.token == fcmToken
                })
            #expect(fcm.body == ["push_account_id": "20", "encrypted_data": .string(fcmCiphertext)])
        }

        // MARK: Legacy (non-E2EE) API

        @Test func legacyRegisterNotifyTestAndUnregister() async throws {
            let stack = try await Stack.get()
            let realm = UUID().uuidString.lowercased()
            let server = try await ZulipServer.registered(stack, realms: [realm])
            let userID: Int64 = 10
            let userUUID = UUID().uuidString.lowercased()
            let apnsToken = RealmClient.apnsToken()
            let fcmToken = RealmClient.fcmToken()
            let strayToken = RealmClient.fcmToken()
            let identity: [(String, String)] = [
                ("server_uuid", server.uuid), ("user_uuid", userUUID), ("realm_uuid", realm),
                ("user_id", String(userID)),
            ]
            expectSuccess(
                try await server.post(
                    "push/register",
                    form: identity + [("token", apnsToken), ("token_kind", "1"), ("ios_app_id", appID)]),
                "push/register APNs")
            expectSuccess(
                try await server.post("push/register", form: identity + [("token", fcmToken), ("token_kind", "2")]),
                "push/register FCM")

            func notify(_ payloads: (apns: JSONValue, gcm: JSONValue), priority: String) async throws -> HTTP.Reply {
                try await server.post(
                    "push/notify",
                    json: [
                        "user_uuid": .string(userUUID), "user_id": .int(userID), "realm_uuid": .string(realm),
                        "apns_payload": payloads.apns, "gcm_payload": payloads.gcm,
                        "gcm_options": ["priority": .string(priority)],
                        "android_devices": [.string(fcmToken), .string(strayToken)],
                        "apple_devices": [.string(apnsToken)],
                    ])
            }

            // A message.
            let message = server.messagePayloads(userID: userID, messageID: 42, content: "lunch at noon")
            let sent = try await notify(message, priority: "high")
            expectSuccess(sent, "push/notify")
            #expect(sent.json["total_android_devices"] == 1, "\(sent.text)")
            #expect(sent.json["total_apple_devices"] == 1, "\(sent.text)")
            #expect(
                sent.json["deleted_devices"] == ["android_devices": [.string(strayToken)], "apple_devices": []],
                "\(sent.text)")
            #expect(sent.json["realm"] == pushable, "\(sent.text)")

            let apns = try #require(
                try await stack.waitForPushes("apns") { $0.contains { $0.token == apnsToken } }.first {
                    $0.token == apnsToken
                })
            #expect(
                apns.body
                    == [
                        "zulip": message.apns["custom"]?["zulip"] ?? .null,
                        "aps": ["alert": message.apns["alert"] ?? .null, "sound": "default", "badge": 0],
                    ], "custom data at the top level, the rest under aps: \(apns.body)")
            #expect(apns.headers["apns-topic"] == appID)
            let fcm = try #require(
                try await stack.waitForPushes("fcm") { $0.contains { $0.token == fcmToken } }.first {
                    $0.token == fcmToken
                })
            var data = fcm.body.objectValue ?? [:]
            #expect(data.removeValue(forKey: "content_truncated")?.stringValue?.lowercased() == "false", "\(fcm.body)")
            var expected = fcmData(message.gcm)
            expected["content_truncated"] = nil
            #expect(data == expected, "every gcm_payload value as text")
            #expect(fcm.headers["android.priority"]?.lowercased() == "high")

            // A removal: FCM at normal priority; APNs gets only the badge.
            let removal = server.removePayloads(userID: userID, messageIDs: "42,43")
            expectSuccess(try await notify(removal, priority: "normal"), "push/notify removal")
            let removed = try #require(
                try await stack.waitForPushes("fcm") {
                    $0.contains { $0.token == fcmToken && $0.body["event"] == "remove" }
                }.first { $0.token == fcmToken && $0.body["event"] == "remove" })
            #expect(removed.body.objectValue == fcmData(removal.gcm))
            #expect(removed.headers["android.priority"]?.lowercased() == "normal")
            let removedAPNs = try #require(
                try await stack.waitForPushes("apns") {
                    $0.contains { $0.token == apnsToken && $0.body["zulip"]?["event"] == "remove" }
                }.first { $0.token == apnsToken && $0.body["zulip"]?["event"] == "remove" })
            #expect(removedAPNs.body == ["zulip": removal.apns["custom"]?["zulip"] ?? .null, "aps": ["badge": 0]])

            // test_notification, one call per device as Zulip's server makes them.
            func testNotification(token: String, kind: Int64) async throws -> HTTP.Reply {
                try await server.post(
                    "push/test_notification",
                    json: [
                        "realm_uuid": .string(realm), "user_uuid": .string(userUUID), "user_id": .int(userID),
                        "token": .string(token), "token_kind": .int(kind),
                        "base_payload": .object(server.basePayload(userID: userID)),
                    ])
            }
            expectSuccess(try await testNotification(token: apnsToken, kind: 1), "test_notification APNs")
            expectSuccess(try await testNotification(token: fcmToken, kind: 2), "test_notification FCM")
            let testAPNs = try #require(
                try await stack.waitForPushes("apns") {
                    $0.contains { $0.token == apnsToken && $0.body["zulip"]?["event"] == "test" }
                }.first { $0.token == apnsToken && $0.body["zulip"]?["event"] == "test" })
            #expect(testAPNs.body["aps"]?["alert"]?["title"] == "Test notification", "\(testAPNs.body)")
            #expect(testAPNs.body["zulip"]?["realm_url"] == .string(server.realmURL))
            #expect(testAPNs.headers["apns-topic"] == appID)
            let testFCM = try #require(
                try await stack.waitForPushes("fcm") {
                    $0.contains { $0.token == fcmToken && $0.body["event"] == "test" }
                }.first { $0.token == fcmToken && $0.body["event"] == "test" })
            #expect(testFCM.body["realm_url"] == .string(server.realmURL))
            #expect(testFCM.headers["android.priority"]?.lowercased() == "high")
            expectError(
                try await testNotification(token: strayToken, kind: 2), status: 400,
                code: "INVALID_REMOTE_PUSH_DEVICE_TOKEN",
                "test_notification for a token the relay does not have")

            // Unregister one token, then all.
            let unregister = identity + [("token", fcmToken), ("token_kind", "2")]
            expectSuccess(try await server.post("push/unregister", form: unregister), "push/unregister")
            expectError(
                try await server.post("push/unregister", form: unregister), status: 400, code: nil,
                msg: "Token does not exist",
                "push/unregister again")
            let afterOne = try await notify(message, priority: "high")
            expectSuccess(afterOne, "push/notify after unregister")
            #expect(afterOne.json["total_android_devices"] == 0, "\(afterOne.text)")
            #expect(afterOne.json["total_apple_devices"] == 1, "\(afterOne.text)")
            #expect(
                afterOne.json["deleted_devices"]?["android_devices"]
                    == .array([fcmToken, strayToken].sorted().map { .string($0) }),
                "the server's tokens the relay no longer has, sorted: \(afterOne.text)")

            expectSuccess(try await server.post("push/unregister/all", form: identity), "push/unregister/all")
            let afterAll = try await notify(message, priority: "high")
            expectSuccess(afterAll, "push/notify after unregister/all")
            #expect(afterAll.json["total_android_devices"] == 0, "\(afterAll.text)")
            #expect(afterAll.json["total_apple_devices"] == 0, "\(afterAll.text)")
            #expect(afterAll.json["deleted_devices"]?["apple_devices"] == [.string(apnsToken)], "\(afterAll.text)")
        }

        @Test func legacyUserIDOnlyRegistrationAndNotify() async throws {
            let stack = try await Stack.get()
            let realm = UUID().uuidString.lowercased()
            let server = try await ZulipServer.registered(stack, realms: [realm])
            let token = RealmClient.fcmToken()
            expectSuccess(
                try await server.post(
                    "push/register",
                    form: [
                        ("server_uuid", server.uuid), ("realm_uuid", realm), ("user_id", "77"), ("token", token),
                        ("token_kind", "2"),
                    ]), "push/register with user_id only")
            let message = server.messagePayloads(userID: 77, messageID: 7, content: "hi")
            let reply = try await server.post(
                "push/notify",
                json: [
                    "user_id": 77, "realm_uuid": .string(realm), "apns_payload": [:], "gcm_payload": message.gcm,
                    "gcm_options": ["priority": "high"], "android_devices": [.string(token)], "apple_devices": [],
                ])
            expectSuccess(reply, "push/notify with user_id only")
            #expect(reply.json["total_android_devices"] == 1, "\(reply.text)")
            #expect(reply.json["total_apple_devices"] == 0, "\(reply.text)")
            #expect(reply.json["deleted_devices"] == ["android_devices": [], "apple_devices": []], "\(reply.text)")
            let push = try #require(
                try await stack.waitForPushes("fcm") { $0.contains { $0.token == token } }.first { $0.token == token })
            #expect(push.body["zulip_message_id"] == "7")
        }

        @Test func legacyRegisterRefusesWhatZulipsBouncerRefuses() async throws {
            let stack = try await Stack.get()
            let realm = UUID().uuidString.lowercased()
            let server = try await ZulipServer.registered(stack, realms: [realm])
            let identity: [(String, String)] = [
                ("server_uuid", server.uuid), ("user_uuid", UUID().uuidString.lowercased()), ("realm_uuid", realm),
                ("user_id", "5"),
            ]
            expectError(
                try await server.post(
                    "push/register", form: identity + [("token", RealmClient.apnsToken()), ("token_kind", "1")]),
                status: 400, code: nil, msg: "Missing ios_app_id", "APNs without ios_app_id")
            expectError(
                try await server.post(
                    "push/register", form: identity + [("token", RealmClient.fcmToken()), ("token_kind", "3")]),
                status: 400, code: nil, "token_kind 3")
            expectError(
                try await server.post(
                    "push/register",
                    form: [
                        ("server_uuid", server.uuid), ("realm_uuid", realm), ("token", RealmClient.fcmToken()),
                        ("token_kind", "2"),
                    ]),
                status: 400, code: nil, "neither user_id nor user_uuid")
        }

        @Test func legacyPlaintextNeverReachesTheTopicsOrLogs() async throws {
            let stack = try await Stack.get()
            let realm = UUID().uuidString.lowercased()
            let server = try await ZulipServer.registered(stack, realms: [realm])
            let apnsToken = RealmClient.apnsToken()
            let fcmToken = RealmClient.fcmToken()
            let identity: [(String, String)] = [("server_uuid", server.uuid), ("realm_uuid", realm), ("user_id", "9")]
            expectSuccess(
                try await server.post(
                    "push/register",
                    form: identity + [("token", apnsToken), ("token_kind", "1"), ("ios_app_id", appID)]),
                "push/register APNs")
            expectSuccess(
                try await server.post("push/register", form: identity + [("token", fcmToken), ("token_kind", "2")]),
                "push/register FCM")
            let secret = "plaintext-\(UUID().uuidString)"
            let message = server.messagePayloads(userID: 9, messageID: 1, content: secret)
            let reply = try await server.post(
                "push/notify",
                json: [
                    "user_id": 9, "realm_uuid": .string(realm), "apns_payload": message.apns,
                    "gcm_payload": message.gcm,
                    "gcm_options": ["priority": "high"], "android_devices": [.string(fcmToken)],
                    "apple_devices": [.string(apnsToken)],
                ])
            expectSuccess(reply, "push/notify")
            // Legacy content is readable by the provider by design; it arrived, so it went through the topics.
            let apns = try await stack.waitForPushes("apns") { $0.contains { $0.token == apnsToken } }
            #expect(apns.first { $0.token == apnsToken }?.body["aps"]?["alert"]?["body"] == .string(secret))
            let fcm = try await stack.waitForPushes("fcm") { $0.contains { $0.token == fcmToken } }
            #expect(fcm.first { $0.token == fcmToken }?.body["content"] == .string(secret))

            for topic in ["push.requests", "push.outbound"] {
                let records = try stack.records(topic)
                #expect(!records.isEmpty, "\(topic) was read")
                #expect(
                    !records.contains { String(decoding: $0.value, as: UTF8.self).contains(secret) },
                    "\(topic) holds the content in clear")
            }
            for service in Stack.Service.allCases {
                #expect(!stack.log(service).contains(secret), "\(service.rawValue) logged the content")
            }
        }
    }
}
