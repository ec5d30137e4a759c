import PushModels

/// One push as a provider client sends it, already opened: the device token in the
/// clear, the exact body bytes, and what the request's headers need. The dispatcher
/// builds it once for each record it handles, from the `OutboundRecord` and its opened
/// token and body, and hands it to the provider's `PushProviderClient`, as APNSwift
/// hands its client a request value. The record itself is not filled in: it stays
/// sealed for whatever is published after the attempt (retry, dead letter).
///
/// It carries exactly the fields the clients read, nothing of the record's bookkeeping
/// (realm, attempts, timestamps). It holds the token in the clear: it lives in memory
/// for one send and is never encoded.
public struct ProviderPush: Sendable, Equatable {
    /// The platform, which picks the client (and for APNs, the VoIP headers).
    public var provider: Provider
    /// The device token in the clear: the APNs, FCM or Huawei token, or for Web Push,
    /// simple push and WNS the endpoint URL the device registered.
    public var token: String
    /// The APNs topic (the app's bundle id); unused by the other providers.
    public var appID: String?
    /// The priorities and the APNs push type.
    public var delivery: DeliveryClass
    /// The provider body, the exact bytes to send: the APNs JSON body, the FCM or
    /// Huawei data object (or message fields, as `bodyForm` says), the Web Push body.
    public var body: [UInt8]
    /// How FCM and Huawei read `body`: nil, the data object alone; `message`, the
    /// message's own fields without the token.
    public var bodyForm: BodyForm?
    /// Unix seconds after which the push is useless; nil keeps the provider's default.
    public var expiresAt: Int64?
    /// The realm's collapse id, if it chose one.
    public var collapseID: String?
    /// The notification and the device the push is for: the APNs `apns-id` is made
    /// from them.
    public var notificationID: NotificationID
    public var deviceID: DeviceID
    /// A pipeline dry run: FCM and Huawei are asked to check it without delivering it
    /// (`validate_only`); no other client is called with one.
    public var validateOnly = false

    public init(
        provider: Provider, token: String, appID: String? = nil, delivery: DeliveryClass, body: [UInt8],
        bodyForm: BodyForm? = nil, expiresAt: Int64? = nil, collapseID: String? = nil,
        notificationID: NotificationID, deviceID: DeviceID
    ) {
        self.provider = provider
        self.token = token
        self.appID = appID
        self.delivery = delivery
        self.body = body
        self.bodyForm = bodyForm
        self.expiresAt = expiresAt
        self.collapseID = collapseID
        self.notificationID = notificationID
        self.deviceID = deviceID
    }

    /// The push a record asks for, given its token and body opened (or, in a record
    /// from before they were sealed, as it carries them in the clear).
    public init(record: OutboundRecord, token: String, body: [UInt8]) {
        self.init(
            provider: record.provider, token: token, appID: record.appID, delivery: record.delivery, body: body,
            bodyForm: record.bodyForm,
            expiresAt: record.providerExpiry == .providerDefault ? nil : record.expiresAt,
            collapseID: record.collapseID,
            notificationID: record.notificationID, deviceID: record.deviceID)
        validateOnly = record.sendMode == .validateOnly
    }
}
