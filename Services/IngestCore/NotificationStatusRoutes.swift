import DeviceState
import HTTPTypes
import Hummingbird
import PushModels
import ServiceKit

/// `GET /v1/notifications/{notification_id}`: where each device's push of one
/// notification stands, for the server that sent it (docs/api/native.md, "Delivery
/// status"). Feedback fills it from the pipeline's topics; it is kept for
/// `PUSHRELAY_DELIVERY_STATUS_TTL_SECONDS`. An id of another server's notification
/// answers exactly as an unknown one: 404 `NOTIFICATION_NOT_FOUND`.
struct NotificationStatusController: Sendable {
    let authenticator: ServerAuthenticator
    let ownership: RealmOwnership
    let store: any DeliveryStatusStore

    /// The relay's ids of what a Zulip or gorush call accepted, comma-separated in request
    /// order: those APIs' answers have no place for them, and the status is read by them.
    // swift-format-ignore: NeverForceUnwrap
    static let notificationIDsHeader = HTTPField.Name("X-PushRelay-Notification-Ids")!

    static let notFound = APIError(
        status: .notFound, code: "NOTIFICATION_NOT_FOUND",
        message: "No such notification from this server (or its status has expired)")

    func routes() -> RouteCollection<IngestContext> {
        let router = RouteCollection(context: IngestContext.self)
        router.get("/v1/notifications/:notification_id") { request, context in
            try await status(request, context: context, id: context.parameters.get("notification_id"))
        }
        return router
    }

    func status(_ request: Request, context: IngestContext, id: String?) async throws -> Response {
        let server = try await authenticator.authenticate(request, context: context, api: .native)
        // Ids are lowercase UUIDs as ingest hands them out; anything else is unknown.
        guard let id, let canonical = Syntax.canonicalUUID(id), canonical == id,
            let found = try await store.status(of: NotificationID(id))
        else { throw Self.notFound }
        let owner: ServerID?
        if let sender = found.server {
            owner = sender
        } else {
            // Its acceptance not read yet: the realm's owner sent it.
            owner = try await ownership.owner(of: found.realm)
        }
        guard owner == server else { throw Self.notFound }
        return success(Self.answer(found, id: NotificationID(id)))
    }

    /// The answer's fields: each device's status by device id (never its token), and a
    /// count per state.
    static func answer(_ status: NotificationStatus, id: NotificationID) -> [String: JSONValue] {
        var counts: [String: Int64] = [:]
        let devices: [JSONValue] = status.devices.sorted { $0.key < $1.key }.map { device, deviceStatus in
            counts[deviceStatus.state.rawValue, default: 0] += 1
            guard case .object(var fields) = deviceStatus.json else { return deviceStatus.json }
            fields["device_id"] = .int(device.rawValue)
            return .object(fields)
        }
        var fields: [String: JSONValue] = [
            "notification_id": .string(id.rawValue), "realm_uuid": .string(status.realm.rawValue),
            "devices": .array(devices), "devices_truncated": .bool(status.truncated),
            "summary": .object(counts.mapValues { .int($0) }),
        ]
        fields["accepted_at_ms"] = status.acceptedAtMs.map { .int($0) } ?? .null
        if let overall = status.overall { fields["notification"] = overall.json }
        return fields
    }
}
