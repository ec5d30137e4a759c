import Foundation
import HTTPTypes
import Kafka
import PushCrypto
import PushModels
import Testing
@testable import StageTestSupport

/// Every ingest route through Hummingbird's router test framework (no sockets): the
/// router of `IngestAPI` on the dev stack's Redis (a key prefix per test) with a recording
/// publisher in place of Kafka. Each route gets a success and an error case; notify routes
/// are also judged by what reached the publisher.
@Suite struct IngestRouterTests {
    static let appID = "org.zulip.Zulip"
    static let pushable: JSONValue = ["can_push": true, "expected_end_timestamp": .null]

    // MARK: - Zulip bouncer API: server housekeeping

    @Test func serverRegister() async throws {
        let fixture = try await RouterFixture.make()
        try await fixture.run { client in
            let server = RouterServer()
            let first = try await client.register(server)
            expectRouterSuccess(first, "a new server")
            #expect(first.json["created"] == true, "\(first.text)")
            let again = try await client.register(server)
            expectRouterSuccess(again, "the same server again")
            #expect(again.json["created"] == false, "\(again.text)")

            let otherKey = RouterServer().key
            let stolen = try await client.send(
                .post, "/api/v1/remotes/server/register",
                .form([
                    ("zulip_org_id", server.uuid), ("zulip_org_key", otherKey), ("hostname", server.hostname),
                    ("contact_email", "admin@\(server.hostname)"),
                ]))
            expectRouterError(
                stolen, 400, "INVALID_ZULIP_SERVER",
                msg: "Zulip server auth failure: key does not match role \(server.uuid)",
                "re-registering with another key")
            #expect(stolen.json["role"] == .string(server.uuid), "\(stolen.text)")

            let badKey = try await client.send(
                .post, "/api/v1/remotes/server/register",
                .form([
                    ("zulip_org_id", UUID().uuidString), ("zulip_org_key", "short"), ("hostname", "zulip.example.org"),
                    ("contact_email", "admin@example.org"),
                ]))
            expectRouterError(badKey, 400, "BAD_REQUEST", "a key that is not 64 letters and digits")
            #expect(badKey.json["field"] == "zulip_org_key", "\(badKey.text)")
        }
        #expect(fixture.publisher.calls == 0)
    }

    @Test func serverRegisterWhenRegistrationIsClosed() async throws {
        let fixture = try await RouterFixture.make(["pushrelay.server.registration": "closed"])
        try await fixture.run { client in
            expectRouterError(
                try await client.register(RouterServer()), 403, "REGISTRATION_CLOSED",
                "a new server, registration closed")
        }
    }

    @Test func serverDeactivate() async throws {
        let fixture = try await RouterFixture.make()
        try await fixture.run { client in
            let server = try await client.registeredServer()
            let wrong = try await client.send(
                .post, "/api/v1/remotes/server/deactivate", auth: (server.uuid, RouterServer().key))
            expectRouterError(
                wrong, 401, "UNAUTHORIZED", msg: "Zulip server auth failure: key does not match role \(server.uuid)",
                "deactivate with a wrong key")
            #expect(wrong.headers[.wwwAuthenticate] == #"Basic realm="zulip""#, "\(wrong.headers)")

            expectRouterSuccess(
                try await client.send(.post, "/api/v1/remotes/server/deactivate", auth: server.auth), "deactivate")
            let after = try await client.send(.get, "/api/v1/remotes/server/analytics/status", auth: server.auth)
            expectRouterError(
                after, 401, "UNAUTHORIZED",
                msg: "The mobile push notification service registration for your server has been deactivated",
                "a deactivated server's call")
            #expect(after.headers[.wwwAuthenticate] == #"Basic realm="zulip""#)
            expectRouterError(
                try await client.register(server), 401, "REALM_DEACTIVATED", "re-registering a deactivated server")
        }
    }

    @Test func serverAnalyticsUploadAndStatus() async throws {
        let fixture = try await RouterFixture.make()
        try await fixture.run { client in
            let server = try await client.registeredServer()
            let statusPath = "/api/v1/remotes/server/analytics/status"
            let before = try await client.send(.get, statusPath, auth: server.auth)
            expectRouterSuccess(before, "analytics/status before any upload")
            #expect(before.json["last_realm_count_id"] == 0, "\(before.text)")
            #expect(before.json["last_installation_count_id"] == 0, "\(before.text)")
            #expect(before.json["last_realmauditlog_id"] == 0, "\(before.text)")

            let realm = UUID().uuidString.lowercased()
            let realmEntry: JSONValue = [
                "id": 2, "uuid": .string(realm), "host": .string(server.hostname), "url": "https://example.org",
                "name": "Example", "org_type": 10, "deactivated": false, "is_system_bot_realm": false,
                "uuid_owner_secret": "zuliprealm_secret",
            ]
            let upload = try await client.send(
                .post, "/api/v1/remotes/server/analytics", auth: server.auth,
                .form([
                    ("realm_counts", routerJSONText([["id": 7, "property": "x", "value": 1], ["id": 12]])),
                    ("installation_counts", routerJSONText([["id": 3]])),
                    ("realmauditlog_rows", routerJSONText([])), ("realms", routerJSONText([realmEntry])),
                    ("version", routerJSONText("12.0")), ("merge_base", routerJSONText("a1b2c3")),
                    ("api_feature_level", routerJSONText(468)),
                ]))
            expectRouterSuccess(upload, "analytics upload")
            #expect(upload.json["realms"] == .object([realm: Self.pushable]), "\(upload.text)")

            let after = try await client.send(.get, statusPath, auth: server.auth)
            expectRouterSuccess(after, "analytics/status after the upload")
            #expect(after.json["last_realm_count_id"] == 12, "\(after.text)")
            #expect(after.json["last_installation_count_id"] == 3, "\(after.text)")
            #expect(after.json["last_realmauditlog_id"] == 0, "\(after.text)")

            // The uploaded realm is the server's now: another server cannot upload it.
            let other = try await client.registeredServer()
            let duplicate = try await client.send(
                .post, "/api/v1/remotes/server/analytics", auth: other.auth,
                .json(["realms": [["uuid": .string(realm)]]]))
            expectRouterError(
                duplicate, 400, "BAD_REQUEST", msg: "Duplicate registration detected.", "another server's realm")
            let badRows = try await client.send(
                .post, "/api/v1/remotes/server/analytics", auth: server.auth,
                .form([("realm_counts", routerJSONText(["id": 3]))]))
            expectRouterError(badRows, 400, "BAD_REQUEST", "realm_counts that is not a list")
            #expect(badRows.json["field"] == "realm_counts", "\(badRows.text)")

            let anonymous = try await client.send(.get, statusPath)
            expectRouterError(
                anonymous, 401, "UNAUTHORIZED", msg: "Missing authorization header for basic auth",
                "analytics/status without credentials")
            #expect(anonymous.headers[.wwwAuthenticate] == #"Basic realm="zulip""#)
        }
        #expect(fixture.publisher.calls == 0)
    }

    // MARK: - Zulip bouncer API: E2EE

    @Test func e2eeRegisterBothDialects() async throws {
        let fixture = try await RouterFixture.make()
        try await fixture.run { client in
            let realm = UUID().uuidString.lowercased()
            let server = try await client.registeredServer(realms: [realm])
            let path = "/api/v1/remotes/push/e2ee/register"
            let apnsToken = routerAPNsToken()

            // Zulip 12: token_id, plain success.
            let byTokenID: [(String, String)] = [
                ("realm_uuid", realm), ("token_id", Fingerprint.zulipTokenID(apnsToken)),
                (
                    "encrypted_push_registration",
                    try fixture.sealedRegistration(kind: "apns", token: apnsToken, appID: Self.appID)
                ),
                ("bouncer_public_key", fixture.bouncerPublicKey),
            ]
            let registered = try await client.send(.post, path, auth: server.auth, .form(byTokenID))
            expectRouterSuccess(registered, "e2ee/register by token_id")
            #expect(registered.json["device_id"] == nil, "Zulip 12 gets no device_id: \(registered.text)")

            // Zulip 11: push_account_id, answered with device_id; the same again, the same id.
            let fcmToken = routerFCMToken()
            func byAccount() throws -> RouterBody {
                .form([
                    ("realm_uuid", realm), ("push_account_id", "20"),
                    (
                        "encrypted_push_registration",
                        try fixture.sealedRegistration(kind: "fcm", token: fcmToken, appID: nil)
                    ),
                    ("bouncer_public_key", fixture.bouncerPublicKey),
                ])
            }
            let first = try await client.send(.post, path, auth: server.auth, try byAccount())
            expectRouterSuccess(first, "e2ee/register by push_account_id")
            let id = try #require(first.json["device_id"]?.intValue, "\(first.text)")
            let second = try await client.send(.post, path, auth: server.auth, try byAccount())
            #expect(second.json["device_id"]?.intValue == id, "the same registration, the same device: \(second.text)")

            // Errors, in Zulip's bouncer's words.
            let unknownRealm = UUID().uuidString.lowercased()
            let missing = try await client.send(
                .post, path, auth: server.auth,
                .form(byTokenID.map { $0.0 == "realm_uuid" ? ("realm_uuid", unknownRealm) : $0 }))
            expectRouterError(
                missing, 403, "MISSING_REMOTE_REALM", msg: "Organization not registered", "a realm never registered")
            let otherKey = try BouncerKeyring(fileContents: try BouncerKeyring.generateLine()).publicKeysBase64[0]
            let wrongKey = try await client.send(
                .post, path, auth: server.auth,
                .form(byTokenID.map { $0.0 == "bouncer_public_key" ? ("bouncer_public_key", otherKey) : $0 }))
            expectRouterError(wrongKey, 400, "INVALID_BOUNCER_PUBLIC_KEY", "a key that is not the relay's")
            let mismatch = try await client.send(
                .post, path, auth: server.auth,
                .form(
                    byTokenID.map {
                        $0.0 == "token_id" ? ("token_id", Fingerprint.zulipTokenID(routerAPNsToken())) : $0
                    }))
            expectRouterError(
                mismatch, 400, "BAD_REQUEST", msg: "Invalid encrypted_push_registration", "a token_id of another token")
            let stale = Int64(Date().timeIntervalSince1970) - 25 * 3600
            let expired = try await client.send(
                .post, path, auth: server.auth,
                .form(
                    byTokenID.map {
                        $0.0 == "encrypted_push_registration"
                            ? (
                                $0.0,
                                try fixture.sealedRegistration(
                                    kind: "apns", token: apnsToken, appID: Self.appID, timestamp: stale)
                            ) : $0
                    }))
            expectRouterError(expired, 400, "REQUEST_EXPIRED", "a registration sealed 25 hours ago")
        }
        #expect(fixture.publisher.calls == 0, "registering publishes nothing")
    }

    @Test func e2eeNotifyPublishesThePayloadsUnchanged() async throws {
        let fixture = try await RouterFixture.make()
        try await fixture.run { client in
            let realm = UUID().uuidString.lowercased()
            let server = try await client.registeredServer(realms: [realm])
            let apnsToken = routerAPNsToken()
            let fcmToken = routerFCMToken()
            for (kind, token) in [("apns", apnsToken), ("fcm", fcmToken)] {
                let reply = try await client.send(
                    .post, "/api/v1/remotes/push/e2ee/register", auth: server.auth,
                    .form([
                        ("realm_uuid", realm), ("token_id", Fingerprint.zulipTokenID(token)),
                        (
                            "encrypted_push_registration",
                            try fixture.sealedRegistration(
                                kind: kind, token: token, appID: kind == "apns" ? Self.appID : nil)
                        ),
                        ("bouncer_public_key", fixture.bouncerPublicKey),
                    ]))
                expectRouterSuccess(reply, "e2ee/register \(kind)")
            }

            let unknown = Fingerprint.zulipTokenID(routerFCMToken())
            let apnsPayload: JSONValue = [
                "push_key_id": 3_735_928_559, "encrypted_data": .string(routerCiphertext()),
                "aps": ["mutable-content": 1, "alert": ["title": "New notification"]],
            ]
            let fcmPayload: JSONValue = ["push_key_id": 7, "encrypted_data": .string(routerCiphertext())]
            let reply = try await client.send(
                .post, "/api/v1/remotes/push/e2ee/notify", auth: server.auth,
                .json([
                    "realm_uuid": .string(realm),
                    "push_requests": [
                        [
                            "token_id": .string(Fingerprint.zulipTokenID(apnsToken)),
                            "http_headers": ["apns_priority": 10, "apns_push_type": "alert"], "payload": apnsPayload,
                        ],
                        [
                            "token_id": .string(Fingerprint.zulipTokenID(fcmToken)), "fcm_priority": "high",
                            "payload": fcmPayload,
                        ],
                        ["token_id": .string(unknown), "fcm_priority": "high", "payload": fcmPayload],
                    ],
                ]))
            expectRouterSuccess(reply, "e2ee/notify")
            #expect(reply.json["apple_successfully_sent_count"] == 1, "\(reply.text)")
            #expect(reply.json["android_successfully_sent_count"] == 1, "\(reply.text)")
            #expect(reply.json["delete_token_ids"] == [.string(unknown)], "\(reply.text)")
            #expect(reply.json["realm_push_status"] == Self.pushable, "\(reply.text)")

            let outgoing = fixture.publisher.records
            try #require(outgoing.count == 1, "one record for the request")
            #expect(outgoing[0].topic == "push.requests")
            let published = try RouterPublished(outgoing[0])
            let record = published.record
            #expect(record.kind == .passThrough && published.json["kind"] == "pass_through")
            #expect(record.serverUUID.rawValue == server.uuid)
            #expect(record.realmUUID.rawValue == realm)
            #expect(published.json["sealed_payload"] == nil, "nothing of the relay's to seal: \(published.json)")
            let items = published.items
            #expect(
                items.map { $0["payload"] } == [apnsPayload, fcmPayload], "the realm's ciphertexts travel as they came")
            #expect(items.first?["apns_priority"] == 10 && items.first?["apns_push_type"] == "alert", "\(items)")
            #expect(items.last?["fcm_priority"] == "high", "\(items)")
            let deviceIDs = items.compactMap { $0["device_id"]?.intValue }
            #expect(
                Set(deviceIDs).count == 2 && deviceIDs.allSatisfy { $0 >= 0 }, "the two registered devices: \(items)")
            #expect(outgoing[0].key == Array(record.partitionKey.utf8))
            #expect(
                outgoing[0].headers.contains {
                    $0.name == "notification_id" && $0.value == Array(record.notificationID.rawValue.utf8)
                })

            // Errors publish nothing.
            let notArray = try await client.send(
                .post, "/api/v1/remotes/push/e2ee/notify", auth: server.auth,
                .json(["realm_uuid": .string(realm), "push_requests": ["token_id": "x"]]))
            expectRouterError(notArray, 400, "BAD_REQUEST", "push_requests that is not an array")
            #expect(notArray.json["field"] == "push_requests", "\(notArray.text)")
            let badItem = try await client.send(
                .post, "/api/v1/remotes/push/e2ee/notify", auth: server.auth,
                .json([
                    "realm_uuid": .string(realm),
                    "push_requests": [
                        [
                            "token_id": .string(Fingerprint.zulipTokenID(fcmToken)), "fcm_priority": "urgent",
                            "payload": fcmPayload,
                        ]
                    ],
                ]))
            expectRouterError(badItem, 400, "INVALID_FIELD", "an fcm_priority that is neither high nor normal")
            #expect(badItem.json["field"] == "push_requests[0].fcm_priority", "\(badItem.text)")
            let otherRealm = try await client.send(
                .post, "/api/v1/remotes/push/e2ee/notify", auth: server.auth,
                .json(["realm_uuid": .string(UUID().uuidString.lowercased()), "push_requests": []]))
            expectRouterError(otherRealm, 403, "MISSING_REMOTE_REALM", "notify for a realm never registered")
            #expect(fixture.publisher.records.count == 1, "no record for the refused requests")
        }
    }

    // MARK: - Zulip bouncer API: legacy (non-E2EE)

    /// The legacy routes' identity fields for one user of `realm`.
    static func legacyIdentity(server: RouterServer, realm: String, userUUID: String) -> [(String, String)] {
        [("server_uuid", server.uuid), ("user_uuid", userUUID), ("realm_uuid", realm), ("user_id", "10")]
    }

    @Test func legacyRegister() async throws {
        let fixture = try await RouterFixture.make()
        try await fixture.run { client in
            let realm = UUID().uuidString.lowercased()
            let server = try await client.registeredServer(realms: [realm])
            let identity = Self.legacyIdentity(server: server, realm: realm, userUUID: UUID().uuidString.lowercased())
            let path = "/api/v1/remotes/push/register"
            expectRouterSuccess(
                try await client.send(
                    .post, path, auth: server.auth,
                    .form(identity + [("token", routerAPNsToken()), ("token_kind", "1"), ("ios_app_id", Self.appID)])),
                "push/register APNs")
            expectRouterSuccess(
                try await client.send(
                    .post, path, auth: server.auth,
                    .form(identity + [("token", routerFCMToken()), ("token_kind", "2")])),
                "push/register FCM")
            expectRouterError(
                try await client.send(
                    .post, path, auth: server.auth,
                    .form(identity + [("token", routerFCMToken()), ("token_kind", "3")])),
                400, "BAD_REQUEST", msg: "Invalid token type", "token_kind 3")
            expectRouterError(
                try await client.send(
                    .post, path, auth: server.auth,
                    .form(identity + [("token", routerAPNsToken()), ("token_kind", "1")])),
                400, "BAD_REQUEST", msg: "Missing ios_app_id", "an APNs token without ios_app_id")
            expectRouterError(
                try await client.send(
                    .post, path, auth: server.auth,
                    .form([("token", routerFCMToken()), ("token_kind", "2")])),
                400, "BAD_REQUEST", msg: "Missing user_id or user_uuid", "no user")
        }
        #expect(fixture.publisher.calls == 0)
    }

    @Test func legacyUnregister() async throws {
        let fixture = try await RouterFixture.make()
        try await fixture.run { client in
            let realm = UUID().uuidString.lowercased()
            let server = try await client.registeredServer(realms: [realm])
            let identity = Self.legacyIdentity(server: server, realm: realm, userUUID: UUID().uuidString.lowercased())
            let token = identity + [("token", routerFCMToken()), ("token_kind", "2")]
            expectRouterSuccess(
                try await client.send(.post, "/api/v1/remotes/push/register", auth: server.auth, .form(token)),
                "push/register")
            expectRouterSuccess(
                try await client.send(.post, "/api/v1/remotes/push/unregister", auth: server.auth, .form(token)),
                "push/unregister")
            expectRouterError(
                try await client.send(.post, "/api/v1/remotes/push/unregister", auth: server.auth, .form(token)),
                400, "BAD_REQUEST", msg: "Token does not exist", "push/unregister again")
        }
    }

    @Test func legacyUnregisterAll() async throws {
        let fixture = try await RouterFixture.make()
        try await fixture.run { client in
            let realm = UUID().uuidString.lowercased()
            let server = try await client.registeredServer(realms: [realm])
            let userUUID = UUID().uuidString.lowercased()
            let identity = Self.legacyIdentity(server: server, realm: realm, userUUID: userUUID)
            let fcmToken = routerFCMToken()
            for tokenFields in [
                [("token", fcmToken), ("token_kind", "2")], [("token", routerFCMToken()), ("token_kind", "2")],
            ] {
                expectRouterSuccess(
                    try await client.send(
                        .post, "/api/v1/remotes/push/register", auth: server.auth, .form(identity + tokenFields)),
                    "push/register")
            }
            expectRouterSuccess(
                try await client.send(.post, "/api/v1/remotes/push/unregister/all", auth: server.auth, .form(identity)),
                "push/unregister/all")
            // Nothing is left: unregistering one of them now finds no token.
            expectRouterError(
                try await client.send(
                    .post, "/api/v1/remotes/push/unregister", auth: server.auth,
                    .form(identity + [("token", fcmToken), ("token_kind", "2")])),
                400, "BAD_REQUEST", msg: "Token does not exist", "a token after unregister/all")
            expectRouterError(
                try await client.send(
                    .post, "/api/v1/remotes/push/unregister/all", auth: server.auth,
                    .form([("server_uuid", server.uuid)])),
                400, "BAD_REQUEST", msg: "Missing user_id or user_uuid", "unregister/all without a user")
        }
    }

    @Test func legacyNotifyPublishesSealedPayloads() async throws {
        let fixture = try await RouterFixture.make()
        try await fixture.run { client in
            let realm = UUID().uuidString.lowercased()
            let server = try await client.registeredServer(realms: [realm])
            let userUUID = UUID().uuidString.lowercased()
            let identity = Self.legacyIdentity(server: server, realm: realm, userUUID: userUUID)
            let apnsToken = routerAPNsToken()
            let fcmToken = routerFCMToken()
            let stray = routerFCMToken()
            expectRouterSuccess(
                try await client.send(
                    .post, "/api/v1/remotes/push/register", auth: server.auth,
                    .form(identity + [("token", apnsToken), ("token_kind", "1"), ("ios_app_id", Self.appID)])),
                "push/register APNs")
            expectRouterSuccess(
                try await client.send(
                    .post, "/api/v1/remotes/push/register", auth: server.auth,
                    .form(identity + [("token", fcmToken), ("token_kind", "2")])),
                "push/register FCM")

            let secret = "lunch-\(UUID().uuidString)"
            let zulip: JSONValue = [
                "server": .string(server.hostname), "realm_id": 2, "realm_url": "https://example.org", "user_id": 10,
                "event": "message", "zulip_message_id": 42, "content": .string(secret),
            ]
            let notify = try await client.send(
                .post, "/api/v1/remotes/push/notify", auth: server.auth,
                .json([
                    "user_uuid": .string(userUUID), "user_id": 10, "realm_uuid": .string(realm),
                    "apns_payload": ["alert": ["body": .string(secret)], "badge": 0, "custom": ["zulip": zulip]],
                    "gcm_payload": zulip, "gcm_options": ["priority": "high"],
                    "android_devices": [.string(fcmToken), .string(stray)], "apple_devices": [.string(apnsToken)],
                ]))
            expectRouterSuccess(notify, "push/notify")
            #expect(notify.json["total_android_devices"] == 1, "\(notify.text)")
            #expect(notify.json["total_apple_devices"] == 1, "\(notify.text)")
            #expect(
                notify.json["deleted_devices"] == ["android_devices": [.string(stray)], "apple_devices": []],
                "\(notify.text)")
            #expect(notify.json["realm"] == Self.pushable, "\(notify.text)")

            let outgoing = fixture.publisher.records
            try #require(outgoing.count == 1, "one record for the request")
            #expect(outgoing[0].topic == "push.requests")
            #expect(!routerContains(outgoing[0].value, secret), "the payloads are not in the clear on the topic")
            #expect(routerContains(outgoing[0].value, userUUID), "(the check finds what is in the clear)")
            #expect(!routerContains(outgoing[0].value, fcmToken), "nor the tokens")
            let published = try RouterPublished(outgoing[0])
            let record = published.record
            #expect(record.kind == .legacy && published.json["kind"] == "legacy")
            #expect(record.realmUUID.rawValue == realm)
            #expect(published.json["legacy_user"] == .string("uuid:\(userUUID)"))
            #expect(published.deviceIDs?.count == 2, "both of the user's devices")
            #expect(outgoing[0].key == Array("\(server.uuid):uuid:\(userUUID)".utf8), "keyed by server and user")
            let sealed = try published.sealedPayload()
            let opened = try fixture.pipelineKeys.open(
                sealed, binding: .payload(notificationID: record.notificationID, realmUUID: RealmID(realm), userID: nil)
            )
            #expect(routerContains(opened, secret), "sealed with the pipeline key, bound to the notification")

            let badPayload = try await client.send(
                .post, "/api/v1/remotes/push/notify", auth: server.auth,
                .json(["user_uuid": .string(userUUID), "apns_payload": "text", "gcm_payload": [:]]))
            expectRouterError(badPayload, 400, "BAD_REQUEST", "apns_payload that is not an object")
            #expect(badPayload.json["field"] == "apns_payload", "\(badPayload.text)")
            let badOption = try await client.send(
                .post, "/api/v1/remotes/push/notify", auth: server.auth,
                .json(["user_uuid": .string(userUUID), "gcm_payload": zulip, "gcm_options": ["priority": "urgent"]]))
            expectRouterError(badOption, 400, "BAD_REQUEST", "a gcm_options priority Zulip does not know")
            #expect(fixture.publisher.records.count == 1, "no record for the refused requests")
        }
    }

    @Test func legacyTestNotification() async throws {
        let fixture = try await RouterFixture.make()
        try await fixture.run { client in
            let realm = UUID().uuidString.lowercased()
            let server = try await client.registeredServer(realms: [realm])
            let userUUID = UUID().uuidString.lowercased()
            let identity = Self.legacyIdentity(server: server, realm: realm, userUUID: userUUID)
            let fcmToken = routerFCMToken()
            expectRouterSuccess(
                try await client.send(
                    .post, "/api/v1/remotes/push/register", auth: server.auth,
                    .form(identity + [("token", fcmToken), ("token_kind", "2")])),
                "push/register FCM")
            func test(_ token: String) async throws -> RouterReply {
                try await client.send(
                    .post, "/api/v1/remotes/push/test_notification", auth: server.auth,
                    .json([
                        "realm_uuid": .string(realm), "user_uuid": .string(userUUID), "user_id": 10,
                        "token": .string(token), "token_kind": 2,
                        "base_payload": [
                            "server": .string(server.hostname), "realm_url": "https://example.org", "user_id": 10,
                        ],
                    ]))
            }
            expectRouterSuccess(try await test(fcmToken), "test_notification")
            let outgoing = fixture.publisher.records
            try #require(outgoing.count == 1)
            #expect(outgoing[0].topic == "push.requests")
            let published = try RouterPublished(outgoing[0])
            let record = published.record
            #expect(record.kind == .legacy)
            #expect(published.deviceIDs?.count == 1, "one push, to the named device")
            #expect(!routerContains(outgoing[0].value, "Test notification"), "the test payload travels sealed")
            let opened = try fixture.pipelineKeys.open(
                try published.sealedPayload(),
                binding: .payload(notificationID: record.notificationID, realmUUID: RealmID(realm), userID: nil))
            #expect(routerContains(opened, "Test notification"), "\(String(decoding: opened, as: UTF8.self))")

            expectRouterError(
                try await test(routerFCMToken()), 400, "INVALID_REMOTE_PUSH_DEVICE_TOKEN",
                msg: "Device not recognized by the push bouncer", "a token the relay does not hold")
            #expect(fixture.publisher.records.count == 1)
        }
    }

    // MARK: - Native API

    @Test func nativeRealms() async throws {
        let fixture = try await RouterFixture.make()
        try await fixture.run { client in
            let server = try await client.registeredServer()
            let realm = UUID().uuidString.lowercased()
            let created = try await client.send(
                .post, "/v1/realms", auth: server.auth, .json(["realm_uuid": .string(realm)]))
            expectRouterSuccess(created, status: 201, "a new realm")
            #expect(created.json["created"] == true && created.json["realm_uuid"] == .string(realm), "\(created.text)")
            let again = try await client.send(
                .post, "/v1/realms", auth: server.auth, .json(["realm_uuid": .string(realm.uppercased())]))
            expectRouterSuccess(again, status: 200, "the same realm again (any case)")
            #expect(again.json["created"] == false, "\(again.text)")

            let other = try await client.registeredServer()
            let taken = try await client.send(
                .post, "/v1/realms", auth: other.auth, .json(["realm_uuid": .string(realm)]))
            expectRouterError(taken, 409, "REALM_UNAVAILABLE", "another server's realm")
            let notUUID = try await client.send(
                .post, "/v1/realms", auth: server.auth, .json(["realm_uuid": "realm-1"]))
            expectRouterError(notUUID, 400, "BAD_REQUEST", "a realm_uuid that is not a UUID")
            #expect(notUUID.json["field"] == "realm_uuid")
            let malformed = try await client.send(
                .post, "/v1/realms", auth: server.auth,
                .raw(Array("{\"realm_uuid\":".utf8), contentType: "application/json"))
            expectRouterError(malformed, 400, "MALFORMED_JSON", "a body that is not JSON")

            let wrong = try await client.send(
                .post, "/v1/realms", auth: (server.uuid, RouterServer().key), .json(["realm_uuid": .string(realm)]))
            expectRouterError(wrong, 401, "UNAUTHORIZED", msg: "Missing or invalid server credentials", "a wrong key")
            #expect(wrong.headers[.wwwAuthenticate] == #"Basic realm="pushrelay""#, "\(wrong.headers)")
            let none = try await client.send(.post, "/v1/realms", .json(["realm_uuid": .string(realm)]))
            expectRouterError(none, 401, "UNAUTHORIZED", "no credentials")
            #expect(none.headers[.wwwAuthenticate] == #"Basic realm="pushrelay""#)
            // The right key, but the uuid in another form than its one canonical text.
            for uuid in [server.uuid + "\u{0}", server.uuid + "\u{0}x", "{\(server.uuid)}", " " + server.uuid] {
                let lenient = try await client.send(
                    .post, "/v1/realms", auth: (uuid, server.key), .json(["realm_uuid": .string(realm)]))
                expectRouterError(lenient, 401, "UNAUTHORIZED", "uuid \(uuid.debugDescription)")
            }
            let upper = try await client.send(
                .post, "/v1/realms", auth: (server.uuid.uppercased(), server.key), .json(["realm_uuid": .string(realm)])
            )
            #expect(upper.status == 200, "the same uuid in capitals: \(upper.text)")
        }
    }

    @Test func nativeRegisterDevice() async throws {
        let fixture = try await RouterFixture.make()
        try await fixture.run { client in
            let realm = UUID().uuidString.lowercased()
            let server = try await client.registeredServer(realms: [realm])
            let key = try routerPushKey()
            let token = routerAPNsToken()
            let body: JSONValue = [
                "realm_uuid": .string(realm), "user_id": 5, "token_kind": "apns", "token": .string(token),
                "ios_app_id": .string(Self.appID), "push_key": .string(key.base64), "push_key_id": 1,
            ]
            let created = try await client.send(.post, "/v1/devices", auth: server.auth, .json(body))
            expectRouterSuccess(created, status: 201, "a new device")
            let id = try #require(created.json["device_id"]?.intValue, "\(created.text)")
            #expect(created.json["created"] == true)
            let renewed = try await client.send(.post, "/v1/devices", auth: server.auth, .json(body))
            expectRouterSuccess(renewed, status: 200, "the same device again")
            #expect(renewed.json["device_id"]?.intValue == id && renewed.json["created"] == false, "\(renewed.text)")

            // The sealed form of the token.
            let sealed = try await client.send(
                .post, "/v1/devices", auth: server.auth,
                .json([
                    "realm_uuid": .string(realm), "user_id": 5,
                    "encrypted_push_registration": .string(
                        try fixture.sealedRegistration(kind: "fcm", token: routerFCMToken(), appID: nil)),
                    "bouncer_public_key": .string(fixture.bouncerPublicKey), "push_key": .string(key.base64),
                    "push_key_id": 1,
                ]))
            expectRouterSuccess(sealed, status: 201, "a device by encrypted_push_registration")
            #expect(sealed.json["device_id"]?.intValue.map { $0 != id } == true, "\(sealed.text)")

            var badKey = body.objectValue ?? [:]
            badKey["push_key"] = "AAAA"
            let refused = try await client.send(.post, "/v1/devices", auth: server.auth, .json(.object(badKey)))
            expectRouterError(refused, 400, "INVALID_PUSH_KEY", "a push key that is not 33 bytes")
            #expect(refused.json["field"] == "push_key", "\(refused.text)")
            var badKind = body.objectValue ?? [:]
            badKind["token_kind"] = "mpns"
            expectRouterError(
                try await client.send(.post, "/v1/devices", auth: server.auth, .json(.object(badKind))), 400,
                "UNSUPPORTED_TOKEN_TYPE", "token_kind mpns (a service that is gone)")
            var notOwned = body.objectValue ?? [:]
            notOwned["realm_uuid"] = .string(UUID().uuidString.lowercased())
            expectRouterError(
                try await client.send(.post, "/v1/devices", auth: server.auth, .json(.object(notOwned))), 404,
                "REALM_NOT_FOUND", "a realm that is not the server's")
        }
    }

    @Test func nativeDeleteDevice() async throws {
        let fixture = try await RouterFixture.make()
        try await fixture.run { client in
            let realm = UUID().uuidString.lowercased()
            let server = try await client.registeredServer(realms: [realm])
            let created = try await client.send(
                .post, "/v1/devices", auth: server.auth,
                .json([
                    "realm_uuid": .string(realm), "user_id": 5, "token_kind": "fcm", "token": .string(routerFCMToken()),
                    "push_key": .string(try routerPushKey().base64), "push_key_id": 1,
                ]))
            let id = try #require(created.json["device_id"]?.intValue, "\(created.text)")

            let other = try await client.registeredServer()
            expectRouterError(
                try await client.send(.delete, "/v1/devices/\(id)", auth: other.auth), 404, "DEVICE_NOT_FOUND",
                "another server's device")
            // One canonical form: a leading zero or sign is another id, not this one.
            for lenient in ["0\(id)", "%2B\(id)"] {
                expectRouterError(
                    try await client.send(.delete, "/v1/devices/\(lenient)", auth: server.auth), 404,
                    "DEVICE_NOT_FOUND",
                    "device id \(lenient)")
            }
            let deleted = try await client.send(.delete, "/v1/devices/\(id)", auth: server.auth)
            expectRouterSuccess(deleted, "delete")
            #expect(deleted.json["device_id"]?.intValue == id, "\(deleted.text)")
            expectRouterError(
                try await client.send(.delete, "/v1/devices/\(id)", auth: server.auth), 404, "DEVICE_NOT_FOUND",
                "the same device again")
            expectRouterError(
                try await client.send(.delete, "/v1/devices/not-a-number", auth: server.auth), 404, "DEVICE_NOT_FOUND",
                "an id that is not a number")
            let listed = try await client.send(.get, "/v1/devices?realm_uuid=\(realm)&user_id=5", auth: server.auth)
            #expect(listed.json["devices"] == [], "the device is gone: \(listed.text)")
        }
    }

    @Test func nativeListDevices() async throws {
        let fixture = try await RouterFixture.make()
        try await fixture.run { client in
            let realm = UUID().uuidString.lowercased()
            let server = try await client.registeredServer(realms: [realm])
            let token = routerAPNsToken()
            let key = try routerPushKey()
            let created = try await client.send(
                .post, "/v1/devices", auth: server.auth,
                .json([
                    "realm_uuid": .string(realm), "user_id": 5, "token_kind": "apns", "token": .string(token),
                    "ios_app_id": .string(Self.appID), "push_key": .string(key.base64), "push_key_id": 4,
                    "push_account_id": 99,
                ]))
            let id = try #require(created.json["device_id"]?.intValue, "\(created.text)")

            let listed = try await client.send(.get, "/v1/devices?realm_uuid=\(realm)&user_id=5", auth: server.auth)
            expectRouterSuccess(listed, "list")
            let devices = try #require(listed.json["devices"]?.arrayValue, "\(listed.text)")
            try #require(devices.count == 1, "\(listed.text)")
            let device = devices[0]
            #expect(device["device_id"]?.intValue == id)
            #expect(device["token_kind"] == "apns")
            #expect(device["token"] == .string(DeviceToken.redact(token)), "redacted: \(device)")
            #expect(device["ios_app_id"] == .string(Self.appID))
            #expect(device["push_account_id"] == 99)
            #expect(device["push_key_ids"] == [4] && device["current_push_key_id"] == 4)
            #expect(device["status"] == "active")
            #expect(!routerContains(listed.body, token), "the token is never returned")
            #expect(!routerContains(listed.body, key.base64), "nor the push key")
            let other = try await client.send(.get, "/v1/devices?realm_uuid=\(realm)&user_id=6", auth: server.auth)
            #expect(other.json["devices"] == [], "another user has none: \(other.text)")

            let noUser = try await client.send(.get, "/v1/devices?realm_uuid=\(realm)", auth: server.auth)
            expectRouterError(noUser, 400, "BAD_REQUEST", "no user_id")
            #expect(noUser.json["field"] == "user_id")
            // One canonical form: `+5` and `05` are not user 5.
            for lenient in ["%2B5", "05", "5%00"] {
                let reply = try await client.send(
                    .get, "/v1/devices?realm_uuid=\(realm)&user_id=\(lenient)", auth: server.auth)
                expectRouterError(reply, 400, "BAD_REQUEST", "user_id \(lenient)")
            }
            let intruder = try await client.registeredServer()
            expectRouterError(
                try await client.send(.get, "/v1/devices?realm_uuid=\(realm)&user_id=5", auth: intruder.auth), 404,
                "REALM_NOT_FOUND", "another server's realm")
        }
    }

    /// A registered server, realm and FCM device of user 5, for the notify tests.
    static func nativeDevice(_ client: RouterClient) async throws -> (
        server: RouterServer, realm: String, device: DeviceID
    ) {
        let realm = UUID().uuidString.lowercased()
        let server = try await client.registeredServer(realms: [realm])
        let created = try await client.send(
            .post, "/v1/devices", auth: server.auth,
            .json([
                "realm_uuid": .string(realm), "user_id": 5, "token_kind": "fcm", "token": .string(routerFCMToken()),
                "push_key": .string(try routerPushKey().base64), "push_key_id": 1,
            ]))
        let id = try #require(created.json["device_id"]?.intValue, "\(created.text)")
        return (server, realm, DeviceID(id))
    }

    @Test func nativeNotifySealsThePlaintext() async throws {
        let fixture = try await RouterFixture.make()
        try await fixture.run { client in
            let (server, realm, device) = try await Self.nativeDevice(client)
            let secret = "meet at noon \(UUID().uuidString)"
            let payload = routerMessagePayload(userID: 5, messageID: 42, content: secret)
            let reply = try await client.send(
                .post, "/v1/notify", auth: server.auth,
                .json(["realm_uuid": .string(realm), "user_id": 5, "payload": payload]))
            expectRouterSuccess(reply, status: 202, "notify")
            #expect(reply.json["device_count"] == 1, "\(reply.text)")
            #expect(reply.json["delete_device_ids"] == [], "\(reply.text)")
            let notificationID = try #require(reply.json["notification_id"]?.stringValue, "\(reply.text)")

            let outgoing = fixture.publisher.records
            try #require(outgoing.count == 1, "one record")
            #expect(outgoing[0].topic == "push.requests")
            #expect(!routerContains(outgoing[0].value, secret), "the plaintext is not in the record")
            #expect(routerContains(outgoing[0].value, realm), "(the check finds what is in the clear)")
            #expect(!routerContains(outgoing[0].value, "sender_full_name"), "nor any of its fields")
            let published = try RouterPublished(outgoing[0])
            let record = published.record
            #expect(record.kind == .native && published.json["kind"] == "native")
            #expect(record.notificationID.rawValue == notificationID)
            #expect(
                record.serverUUID.rawValue == server.uuid && record.realmUUID.rawValue == realm
                    && published.json["user_id"] == 5)
            // The targets ingest counted, so the encryptor does not resolve them again.
            #expect(published.json["device_ids"] == [.int(device.rawValue)], "the user's devices: \(published.json)")
            #expect(published.json["notification_type"] == "message")
            #expect(outgoing[0].key == Array("\(realm):5".utf8))
            let sealed = try published.sealedPayload()
            let opened = try fixture.pipelineKeys.open(
                sealed,
                binding: .payload(notificationID: NotificationID(notificationID), realmUUID: RealmID(realm), userID: 5))
            #expect(opened == Wire.canonical(payload), "sealed with the pipeline key, bound to the notification")
            #expect(
                (try? fixture.pipelineKeys.open(
                    sealed,
                    binding: .payload(
                        notificationID: NotificationID(notificationID), realmUUID: RealmID(realm), userID: 6))) == nil,
                "bound to its user")

            // Named devices: an unknown one comes back in delete_device_ids.
            let named = try await client.send(
                .post, "/v1/notify", auth: server.auth,
                .json([
                    "realm_uuid": .string(realm), "user_id": 5, "payload": payload,
                    "device_ids": [.int(device.rawValue), .int(device.rawValue), 987_654_321],
                ]))
            expectRouterSuccess(named, status: 202, "notify to named devices")
            #expect(named.json["device_count"] == 1, "\(named.text)")
            #expect(named.json["delete_device_ids"] == [987_654_321], "\(named.text)")
            #expect(try fixture.published().last?.deviceIDs == [device.rawValue, 987_654_321], "a repeated id once")

            // Refused requests publish nothing.
            let mismatch = try await client.send(
                .post, "/v1/notify", auth: server.auth,
                .json(["realm_uuid": .string(realm), "user_id": 6, "payload": payload]))
            expectRouterError(mismatch, 400, "INVALID_PAYLOAD", "payload.user_id that is not user_id")
            #expect(mismatch.json["field"] == "payload.user_id")
            var untyped = payload.objectValue ?? [:]
            untyped["type"] = "shout"
            let invalid = try await client.send(
                .post, "/v1/notify", auth: server.auth,
                .json(["realm_uuid": .string(realm), "user_id": 5, "payload": .object(untyped)]))
            expectRouterError(invalid, 400, "INVALID_PAYLOAD", "an unknown notification type")
            let tooMany = try await client.send(
                .post, "/v1/notify", auth: server.auth,
                .json([
                    "realm_uuid": .string(realm), "user_id": 5, "payload": payload,
                    "device_ids": .array((1...101).map { .int($0) }),
                ]))
            expectRouterError(tooMany, 413, "TOO_MANY_DEVICES", "101 device ids")
            let notOwned = try await client.send(
                .post, "/v1/notify", auth: server.auth,
                .json(["realm_uuid": .string(UUID().uuidString.lowercased()), "user_id": 5, "payload": payload]))
            expectRouterError(notOwned, 404, "REALM_NOT_FOUND", "a realm that is not the server's")
            #expect(fixture.publisher.records.count == 2, "only the two accepted notifications were published")
        }
    }

    @Test func nativeNotifyAnswers503WhenThePublisherFails() async throws {
        let fixture = try await RouterFixture.make()
        try await fixture.run { client in
            let (server, realm, _) = try await Self.nativeDevice(client)
            let body: RouterBody = .json([
                "realm_uuid": .string(realm), "user_id": 5,
                "payload": routerMessagePayload(userID: 5, messageID: 1, content: "hi"),
            ])
            fixture.publisher.fail(true)
            let key: HTTPFields = [HTTPField.Name("Idempotency-Key")!: "retry-after-503"]
            let refused = try await client.send(.post, "/v1/notify", auth: server.auth, body, headers: key)
            #expect(refused.status != 202, "not accepted when the record was not acknowledged")
            expectRouterError(refused, 503, "SERVICE_UNAVAILABLE", "the publisher fails")
            #expect(refused.headers[.retryAfter] == "5", "\(refused.headers)")
            #expect(refused.json["notification_id"] == nil, "\(refused.text)")
            #expect(fixture.publisher.calls == 1, "it was tried")
            #expect(fixture.publisher.records.count == 0, "nothing was acknowledged")

            // A 503 leaves no answer under its key: the retry is handled afresh.
            fixture.publisher.fail(false)
            let retried = try await client.send(.post, "/v1/notify", auth: server.auth, body, headers: key)
            expectRouterSuccess(retried, status: 202, "the retry once the publisher is back")
            #expect(fixture.publisher.records.count == 1)

            // The bouncer and legacy notify routes answer 503 too.
            let fcmToken = routerFCMToken()
            expectRouterSuccess(
                try await client.send(
                    .post, "/api/v1/remotes/push/e2ee/register", auth: server.auth,
                    .form([
                        ("realm_uuid", realm), ("token_id", Fingerprint.zulipTokenID(fcmToken)),
                        (
                            "encrypted_push_registration",
                            try fixture.sealedRegistration(kind: "fcm", token: fcmToken, appID: nil)
                        ),
                        ("bouncer_public_key", fixture.bouncerPublicKey),
                    ])),
                "e2ee/register")
            let userUUID = UUID().uuidString.lowercased()
            expectRouterSuccess(
                try await client.send(
                    .post, "/api/v1/remotes/push/register", auth: server.auth,
                    .form([("user_uuid", userUUID), ("token", routerFCMToken()), ("token_kind", "2")])),
                "push/register")
            fixture.publisher.fail(true)
            let bouncer = try await client.send(
                .post, "/api/v1/remotes/push/e2ee/notify", auth: server.auth,
                .json([
                    "realm_uuid": .string(realm),
                    "push_requests": [
                        [
                            "token_id": .string(Fingerprint.zulipTokenID(fcmToken)), "fcm_priority": "high",
                            "payload": ["push_key_id": 7, "encrypted_data": .string(routerCiphertext())],
                        ]
                    ],
                ]))
            expectRouterError(bouncer, 503, "SERVICE_UNAVAILABLE", "e2ee notify when the publisher fails")
            let legacy = try await client.send(
                .post, "/api/v1/remotes/push/notify", auth: server.auth,
                .json(["user_uuid": .string(userUUID), "gcm_payload": ["event": "message", "content": "x"]]))
            expectRouterError(legacy, 503, "SERVICE_UNAVAILABLE", "legacy notify when the publisher fails")
            #expect(fixture.publisher.records.count == 1)
        }
    }

    @Test func nativeNotifyIdempotencyKey() async throws {
        let fixture = try await RouterFixture.make()
        try await fixture.run { client in
            let (server, realm, _) = try await Self.nativeDevice(client)
            let body: JSONValue = [
                "realm_uuid": .string(realm), "user_id": 5,
                "payload": routerMessagePayload(userID: 5, messageID: 7, content: "once"),
            ]
            let key: HTTPFields = [HTTPField.Name("Idempotency-Key")!: "k-\(UUID().uuidString)"]
            let first = try await client.send(.post, "/v1/notify", auth: server.auth, .json(body), headers: key)
            expectRouterSuccess(first, status: 202, "first notify")
            let repeated = try await client.send(.post, "/v1/notify", auth: server.auth, .json(body), headers: key)
            expectRouterSuccess(repeated, status: 202, "the same request again")
            #expect(repeated.json == first.json, "the very same answer: \(first.text) / \(repeated.text)")
            #expect(fixture.publisher.records.count == 1, "no second notification")
            #expect(fixture.publisher.calls == 1)

            var changed = body.objectValue ?? [:]
            changed["payload"] = routerMessagePayload(userID: 5, messageID: 8, content: "another")
            expectRouterError(
                try await client.send(.post, "/v1/notify", auth: server.auth, .json(.object(changed)), headers: key),
                422, "IDEMPOTENCY_KEY_REUSED", "the key with another body")
            expectRouterError(
                try await client.send(
                    .post, "/v1/notify", auth: server.auth, .json(body),
                    headers: [HTTPField.Name("Idempotency-Key")!: String(repeating: "k", count: 256)]),
                400, "INVALID_IDEMPOTENCY_KEY", "a key of 256 characters")
            // Without a key, the same body is a new notification.
            let fresh = try await client.send(.post, "/v1/notify", auth: server.auth, .json(body))
            expectRouterSuccess(fresh, status: 202, "no key")
            #expect(fresh.json["notification_id"] != first.json["notification_id"])
            #expect(fixture.publisher.records.count == 2)
        }
    }

    @Test func nativeFeedback() async throws {
        let fixture = try await RouterFixture.make()
        try await fixture.run { client in
            let (server, realm, device) = try await Self.nativeDevice(client)
            let empty = try await client.send(.get, "/v1/feedback?realm_uuid=\(realm)", auth: server.auth)
            expectRouterSuccess(empty, "feedback with nothing invalidated")
            #expect(empty.json["invalidated"] == [] && empty.json["next_cursor"] == .null, "\(empty.text)")

            // A provider calls the token dead (what feedback does, on the same Redis keys).
            let memory = try #require(fixture.memory)
            try #require(memory.devices.invalidate(device, reason: .provider("Unregistered")))

            let listed = try await client.send(.get, "/v1/feedback?realm_uuid=\(realm)&limit=10", auth: server.auth)
            expectRouterSuccess(listed, "feedback")
            let entries = try #require(listed.json["invalidated"]?.arrayValue, "\(listed.text)")
            try #require(entries.count == 1, "\(listed.text)")
            #expect(entries[0]["device_id"]?.intValue == device.rawValue)
            #expect(entries[0]["reason"] == "Unregistered")
            let cursor = try #require(entries[0]["cursor"]?.stringValue)
            #expect(listed.json["next_cursor"] == .string(cursor))
            let after = try await client.send(
                .get, "/v1/feedback?realm_uuid=\(realm)&after=\(cursor)", auth: server.auth)
            expectRouterSuccess(after, "feedback after the last cursor")
            #expect(after.json["invalidated"] == [] && after.json["next_cursor"] == .string(cursor), "\(after.text)")

            // The invalidated device is no longer pushed to.
            let notify = try await client.send(
                .post, "/v1/notify", auth: server.auth,
                .json([
                    "realm_uuid": .string(realm), "user_id": 5,
                    "payload": routerMessagePayload(userID: 5, messageID: 1, content: "x"),
                ]))
            #expect(
                notify.json["device_count"] == 0 && notify.json["delete_device_ids"] == [.int(device.rawValue)],
                "\(notify.text)"
            )

            let badCursor = try await client.send(
                .get, "/v1/feedback?realm_uuid=\(realm)&after=latest", auth: server.auth)
            expectRouterError(badCursor, 400, "BAD_REQUEST", "a cursor this endpoint never gave")
            #expect(badCursor.json["field"] == "after")
            let padded = try await client.send(
                .get, "/v1/feedback?realm_uuid=\(realm)&after=0\(cursor)", auth: server.auth)
            expectRouterError(padded, 400, "BAD_REQUEST", "a cursor with a leading zero")
            let badLimit = try await client.send(.get, "/v1/feedback?realm_uuid=\(realm)&limit=0", auth: server.auth)
            expectRouterError(badLimit, 400, "BAD_REQUEST", "limit 0")
            #expect(badLimit.json["field"] == "limit")
            let intruder = try await client.registeredServer()
            expectRouterError(
                try await client.send(.get, "/v1/feedback?realm_uuid=\(realm)", auth: intruder.auth), 404,
                "REALM_NOT_FOUND", "another server's realm")
        }
    }

    @Test func nativeBouncerPublicKeys() async throws {
        let fixture = try await RouterFixture.make()
        try await fixture.run { client in
            let keys = try await client.send(.get, "/v1/bouncer-public-keys")
            expectRouterSuccess(keys, "bouncer-public-keys, without credentials")
            #expect(keys.json["public_keys"] == [.string(fixture.bouncerPublicKey)], "\(keys.text)")
            // The route takes no input; its one way to fail is a method it does not have.
            let post = try await client.send(.post, "/v1/bouncer-public-keys", .json([:]))
            expectRouterError(post, 405, "METHOD_NOT_ALLOWED", "POST to a GET route")
            #expect(post.headers[.allow] == "GET", "\(post.headers)")
        }
    }

    // MARK: - Across routes

    @Test func unknownRoutesAreJSON404AndWrongMethodsJSON405() async throws {
        let fixture = try await RouterFixture.make()
        try await fixture.run { client in
            expectRouterError(
                try await client.send(.get, "/v1/nothing-here"), 404, "NOT_FOUND", msg: "No such endpoint",
                "an unknown path")
            expectRouterError(
                try await client.send(.get, "/v1/devices/12/extra"), 404, "NOT_FOUND", "one segment too many")
            let get = try await client.send(.get, "/api/v1/remotes/push/notify")
            expectRouterError(get, 405, "METHOD_NOT_ALLOWED", "GET on a POST route")
            #expect(get.headers[.allow] == "POST", "\(get.headers)")
            let post = try await client.send(.post, "/v1/devices/12")
            expectRouterError(post, 405, "METHOD_NOT_ALLOWED", "POST on a DELETE route")
            #expect(post.headers[.allow] == "DELETE", "\(post.headers)")
            let put = try await client.send(.put, "/v1/devices")
            expectRouterError(put, 405, "METHOD_NOT_ALLOWED", "PUT where GET and POST are")
            #expect(put.headers[.allow] == "GET, POST", "\(put.headers)")
        }
    }

    @Test func oversizedBodiesAre413() async throws {
        let fixture = try await RouterFixture.make()
        try await fixture.run { client in
            let (server, realm, _) = try await Self.nativeDevice(client)
            let huge = String(repeating: "x", count: RouterFixture.maxBodyBytes)
            let notify = try await client.send(
                .post, "/v1/notify", auth: server.auth,
                .json([
                    "realm_uuid": .string(realm), "user_id": 5,
                    "payload": routerMessagePayload(userID: 5, messageID: 1, content: huge),
                ]))
            expectRouterError(notify, 413, "REQUEST_TOO_LARGE", "a notify body over the limit")
            let register = try await client.send(
                .post, "/api/v1/remotes/server/register",
                .form([("zulip_org_id", UUID().uuidString), ("hostname", huge)]))
            expectRouterError(register, 413, "REQUEST_TOO_LARGE", "a register body over the limit")
            #expect(fixture.publisher.calls == 0)

            // The analytics upload has its own, larger limit.
            let rows: JSONValue = .array(
                (1...600).map { ["id": .int($0), "property": "invites_sent::day", "value": 1] })
            let upload = try await client.send(
                .post, "/api/v1/remotes/server/analytics", auth: server.auth,
                .form([("realm_counts", routerJSONText(rows))]))
            expectRouterSuccess(upload, "an analytics upload over the general body limit")
        }
    }

    @Test func rateLimitAndFailedAuthenticationThrottle() async throws {
        // A day's window: four requests never straddle two windows (a minute's did, on a loaded machine).
        let fixture = try await RouterFixture.make([
            "pushrelay.ratelimit.requests": "3", "pushrelay.ratelimit.window.seconds": "86400",
            "pushrelay.auth.failures.max": "3",
        ])
        try await fixture.run { client in
            let server = try await client.registeredServer()
            for _ in 0..<3 {
                expectRouterSuccess(
                    try await client.send(.get, "/api/v1/remotes/server/analytics/status", auth: server.auth),
                    "within the limit")
            }
            let limited = try await client.send(.get, "/api/v1/remotes/server/analytics/status", auth: server.auth)
            expectRouterError(limited, 429, "RATE_LIMIT_HIT", "past the server's rate limit")
            #expect(limited.headers[.retryAfter].flatMap { Int($0) }.map { $0 >= 1 } == true, "\(limited.headers)")

            // Failed authentications from one address: past the limit, even a good key is refused.
            let fresh = try await client.registeredServer()
            for _ in 0..<3 {
                expectRouterError(
                    try await client.send(
                        .get, "/v1/feedback?realm_uuid=\(UUID())", auth: (fresh.uuid, RouterServer().key)),
                    401, "UNAUTHORIZED", "a wrong key")
            }
            let locked = try await client.send(.get, "/v1/bouncer-public-keys")
            #expect(locked.status == 200, "an unauthenticated route is not throttled")
            expectRouterError(
                try await client.send(
                    .post, "/v1/realms", auth: fresh.auth, .json(["realm_uuid": .string("\(UUID())")])),
                429, "TOO_MANY_FAILED_AUTHENTICATIONS", "the right key from a locked-out address")
        }
    }
}
