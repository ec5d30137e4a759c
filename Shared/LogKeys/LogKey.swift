/// Metadata keys used in log lines, each declared once so logs stay greppable and one
/// thing is always logged under one key. A module of its own so that the wrapper modules
/// (Kafka, Providers) log under the same keys as the stages.
/// Never log a notification's plaintext or a full device token.
public enum LogKey {
    // A push and its device.
    public static let notificationID = "notification_id"
    public static let deviceID = "device_id"
    public static let realm = "realm_uuid"
    public static let provider = "provider"
    public static let reason = "reason"
    public static let status = "status"
    public static let error = "error"
    public static let token = "token"

    // Kafka.
    public static let brokers = "brokers"
    public static let topic = "topic"
    public static let partition = "partition"
    public static let partitions = "partitions"
    public static let offset = "offset"
    /// Records handed to the stage and not finished when the consumer stopped.
    public static let inFlight = "in_flight"
    /// When a parked partition's record is due (ms since the epoch).
    public static let dueMs = "due_ms"

    // The dispatcher's retries and ledger.
    public static let retryStage = "retry_stage"
    public static let dueInMs = "due_in_ms"
    /// Why a push was dead-lettered (`DeadLetterRecord.Cause`).
    public static let cause = "cause"
    /// How long ago an interrupted send claimed the pair.
    public static let claimedMsAgo = "claimed_ms_ago"

    // Connections: listeners, Redis, providers.
    public static let address = "address"
    /// The ops listener's address (health and metrics).
    public static let ops = "ops"
    public static let tls = "tls"
    public static let user = "user"
    /// A device-chosen endpoint's origin.
    public static let origin = "origin"
    /// Why a request is sent again on another connection.
    public static let why = "why"
    /// An HTTP/2 GOAWAY's last stream id and error code.
    public static let lastStreamID = "last_stream_id"
    public static let code = "code"
    public static let streamID = "stream_id"
    public static let openStreams = "open_streams"

    // Configuration.
    /// An environment variable's name.
    public static let variable = "variable"
}
