import DeviceState
import PushModels

/// This instance's shares of the servers' rate-limit windows, leased from Redis
/// (`ServerStore.leaseQuota`), so a busy server's requests are admitted without a
/// Redis round trip each. A plain value: `ServerAuthenticator` keeps it behind a lock.
///
/// - A lease holds for one window and at most `validity`: a key rotated or a server
///   deactivated through another instance stops working here within that time, since
///   each renewal reads the server's record again.
/// - A lease grows with use: the next asks for twice what the last one served, from 1
///   up to `maxLease`. Requests left when a lease is renewed in the same window go
///   back to the shared counter; requests granted but never used are at most
///   `maxLease` per instance, until the window ends.
struct QuotaLeases: Sendable {
    struct Lease: Sendable {
        var window: Int64
        /// Granted by the last renewal.
        var size: Int
        var left: Int
        /// The stored key it was granted under.
        var credential: String
        var deactivated: Bool
        /// When the renewal was sent: a key verified after this is newer than the lease.
        var takenAt: ContinuousClock.Instant
        /// `validity` after the answer arrived, so a slow Redis never installs a lease
        /// that has already lapsed.
        var validUntil: ContinuousClock.Instant
    }

    /// What one request comes to.
    enum Take: Equatable, Sendable {
        case admitted
        /// The window's quota is used up (on every instance).
        case limited
        case deactivated
        /// The lease was granted under another stored key than the one this request's
        /// key was verified against, after that verification: the key changed.
        case credentialChanged
        /// No current lease with a request left: renew it.
        case renew
    }

    let maxLease: Int
    let validity: Duration
    private(set) var leases: [ServerID: Lease] = [:]

    init(limit: Int, validity: Duration = .seconds(1)) {
        // A window's limit spread over up to 32 instances before any of them holds a share
        // it does not use; 1 for small limits, so they stay exact.
        maxLease = max(1, min(limit / 32, 500))
        self.validity = validity
    }

    /// Takes one request of `server`'s lease for a key verified at `verifiedAt` against
    /// the stored `credential`.
    mutating func take(
        server: ServerID, credential: String, verifiedAt: ContinuousClock.Instant, window: Int64,
        now: ContinuousClock.Instant
    ) -> Take {
        guard var lease = leases[server], lease.window == window, lease.validUntil > now else { return .renew }
        if lease.credential != credential {
            // A lease older than the verification may predate a rotation: ask again.
            return lease.takenAt < verifiedAt ? .renew : .credentialChanged
        }
        if lease.deactivated { return .deactivated }
        if lease.left > 0 {
            lease.left -= 1
            leases[server] = lease
            return .admitted
        }
        return lease.size == 0 ? .limited : .renew
    }

    /// What to ask Redis for when renewing `server`'s lease in `window`: twice what the
    /// last lease served, and its unused requests back when it is of the same window.
    /// The lease is emptied, so nothing is both given back and used.
    mutating func renewal(server: ServerID, window: Int64) -> (want: Int, returning: Int) {
        guard var lease = leases[server] else { return (1, 0) }
        let served = max(0, lease.size - lease.left)
        let returning = lease.window == window ? lease.left : 0
        lease.left = 0
        leases[server] = lease
        return (min(maxLease, max(1, served.saturatingMultiply(2))), returning)
    }

    /// Keeps what Redis granted.
    mutating func install(
        server: ServerID, _ granted: ServerStore.QuotaLease, takenAt: ContinuousClock.Instant,
        now: ContinuousClock.Instant
    ) {
        if leases.count >= 10_000 && leases[server] == nil {
            // Bounded: leases are cheap to take again.
            leases.removeAll()
        }
        leases[server] = Lease(
            window: granted.window, size: granted.granted, left: granted.granted, credential: granted.credential,
            deactivated: granted.deactivated, takenAt: takenAt, validUntil: max(takenAt, now) + validity)
    }

    /// Forgets every lease (a key changed or a server deactivated on this instance).
    mutating func removeAll() {
        leases.removeAll()
    }
}
