import DeviceState
import HTTPTypes
import LogKeys
import Logging
import PushCrypto
import PushModels

/// Whose a realm is, as each API tells it.
struct RealmOwnership: Sendable {
    let realms: any RealmRegistry

    /// The server a realm belongs to, if any.
    func owner(of realm: RealmID) async throws -> ServerID? {
        try await realms.owners([realm]).first ?? nil
    }

    /// Checks that `realm` belongs to `server` (the native API). An unknown realm and
    /// another server's realm get the same 404, so a caller learns nothing of realms not its own.
    func requireOwn(_ realm: RealmID, server: ServerID) async throws {
        guard try await owner(of: realm) == server else {
            throw APIError(status: .notFound, code: "REALM_NOT_FOUND", message: "No such realm on this server")
        }
    }

    /// Whose a realm is, as Zulip's bouncer tells it: the caller's (true), never uploaded
    /// (false: each endpoint decides), or another server's (403).
    func isZulipRealm(_ realm: RealmID, server: ServerID) async throws -> Bool {
        switch try await owner(of: realm) {
        case server?: return true
        case nil: return false
        case _?:
            throw APIError(
                status: .forbidden, code: "REMOTE_REALM_SERVER_MISMATCH_ERROR",
                message:
                    "Your organization is registered to a different Zulip server. Please contact Zulip support for assistance in resolving this issue."
            )
        }
    }

    /// The E2EE endpoints need the realm uploaded first.
    func requireZulipRealm(_ realm: RealmID, server: ServerID) async throws {
        guard try await isZulipRealm(realm, server: server) else {
            throw APIError(status: .forbidden, code: "MISSING_REMOTE_REALM", message: "Organization not registered")
        }
    }

    /// What every Zulip realm is told of its pushes: allowed, with no end (Zulip's answer
    /// for a plan that never lapses).
    static let zulipPushStatus: JSONValue = ["can_push": true, "expected_end_timestamp": .null]
}
