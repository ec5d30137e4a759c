import DeviceState
import Foundation
import Kafka
import Logging
import Metrics
import PushCrypto
import PushModels
import RedisClient
import ServiceKit

/// The devices of a batch of requests, read in two pipelined round trips at most (the
/// users' device sets, then every device record). Whatever was not read (past
/// `maxDevices`) is asked of the directory behind it.
struct PrefetchedDevices: DeviceDirectory {
    private struct User: Hashable {
        var realm: RealmID
        var userID: Int64
    }

    /// Device records read for one batch at most; a request past it reads its own.
    static let maxDevices = 4096

    private let base: any DeviceDirectory
    private let users: [User: [DeviceID]]
    private let read: Set<DeviceID>
    private let found: [DeviceID: DeviceRecord]

    static func read(for requests: [PushRequestRecord], from base: any DeviceDirectory) async throws
        -> PrefetchedDevices
    {
        var wanted: [User] = []
        var seen: Set<User> = []
        var ids: Set<DeviceID> = []
        for request in requests {
            switch request.request {
            case .native(let userID, let deviceIDs, _, _):
                if let deviceIDs {
                    if ids.count + deviceIDs.count <= maxDevices { ids.formUnion(deviceIDs) }
                } else if seen.insert(User(realm: request.realmUUID, userID: userID)).inserted {
                    wanted.append(User(realm: request.realmUUID, userID: userID))
                }
            case .passThrough(let items):
                if ids.count + items.count <= maxDevices { ids.formUnion(items.map(\.deviceID)) }
            case .legacy(_, let deviceIDs, _), .gorush(let deviceIDs, _):
                if ids.count + deviceIDs.count <= maxDevices { ids.formUnion(deviceIDs) }
            }
        }
        var users: [User: [DeviceID]] = [:]
        if !wanted.isEmpty {
            let lists = try await base.deviceIDs(users: wanted.map { ($0.realm, $0.userID) })
            for (user, list) in zip(wanted, lists) {
                users[user] = list
                if ids.count + list.count <= maxDevices { ids.formUnion(list) }
            }
        }
        let found = ids.isEmpty ? [:] : try await base.devices(Array(ids))
        return PrefetchedDevices(base: base, users: users, read: ids, found: found)
    }

    func deviceIDs(realm: RealmID, userID: Int64) async throws -> [DeviceID] {
        if let ids = users[User(realm: realm, userID: userID)] { return ids }
        return try await base.deviceIDs(realm: realm, userID: userID)
    }

    func devices(_ ids: [DeviceID]) async throws -> [DeviceID: DeviceRecord] {
        let unread = ids.filter { !read.contains($0) }
        var result = unread.isEmpty ? [:] : try await base.devices(unread)
        for id in ids { if let device = found[id] { result[id] = device } }
        return result
    }
}
