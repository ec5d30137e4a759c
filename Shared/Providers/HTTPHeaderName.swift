/// The HTTP header names the relay's outbound clients write and read (the providers'
/// and the feedback hooks'), each spelt once. Lower case: HTTP/2 requires it, and HTTP/1.1
/// compares names without case.
public enum HTTPHeaderName {
    // HTTP/2 pseudo-headers (RFC 9113 §8.3).
    public static let method = ":method"
    public static let scheme = ":scheme"
    public static let authority = ":authority"
    public static let path = ":path"
    public static let status = ":status"

    // HTTP (RFC 9110).
    public static let authorization = "authorization"
    public static let contentType = "content-type"
    public static let contentEncoding = "content-encoding"
    public static let location = "location"
    public static let retryAfter = "retry-after"

    // APNs (docs/protocols.md §2).
    public static let apnsID = "apns-id"
    public static let apnsTopic = "apns-topic"
    public static let apnsPushType = "apns-push-type"
    public static let apnsPriority = "apns-priority"
    public static let apnsExpiration = "apns-expiration"
    public static let apnsCollapseID = "apns-collapse-id"

    // Web Push (RFC 8030 §5).
    public static let ttl = "ttl"
    public static let urgency = "urgency"
    public static let topic = "topic"

    // WNS (docs/protocols.md §10).
    public static let wnsType = "x-wns-type"
    public static let wnsCachePolicy = "x-wns-cache-policy"
    public static let wnsTTL = "x-wns-ttl"
    public static let wnsStatus = "x-wns-status"
    public static let wnsMessageID = "x-wns-msg-id"
    public static let wnsErrorDescription = "x-wns-error-description"

    // The relay's own.
    /// A feedback hook's signature (docs/api/gorush.md): `t=<unix>,v1=<hex HMAC-SHA256>`.
    public static let pushRelaySignature = "x-pushrelay-signature"
}
