import Synchronization

/// Redis Cluster's key → slot function: CRC16 (XMODEM) of the key, or of its hash tag
/// (the text between the first `{` and the next `}`, when not empty), modulo 16,384.
/// Keys with the same tag are in the same slot, so one script may touch them all.
public enum RedisSlot {
    public static let count = 16_384

    public static func of(_ key: [UInt8]) -> Int {
        Int(crc16(hashTag(key)) % UInt16(count))
    }

    public static func of(_ key: String) -> Int { of(Array(key.utf8)) }

    /// The part of a key that is hashed.
    static func hashTag(_ key: [UInt8]) -> ArraySlice<UInt8> {
        guard let open = key.firstIndex(of: UInt8(ascii: "{")),
            let close = key[(open + 1)...].firstIndex(of: UInt8(ascii: "}")), close > open + 1
        else { return key[...] }
        return key[(open + 1)..<close]
    }

    /// CRC-16/XMODEM (polynomial 0x1021, initial value 0), as the Redis Cluster specification gives it.
    static func crc16(_ bytes: ArraySlice<UInt8>) -> UInt16 {
        var crc: UInt16 = 0
        for byte in bytes {
            crc ^= UInt16(byte) << 8
            for _ in 0..<8 {
                crc = crc & 0x8000 != 0 ? (crc << 1) ^ 0x1021 : crc << 1
            }
        }
        return crc
    }
}

/// Where a command's keys are, so it can be routed by slot.
enum CommandKeys {
    /// Commands that name no key: sent to any master.
    private static let keyless: Set<String> = [
        "PING", "ECHO", "INFO", "SCRIPT", "CLUSTER", "ASKING", "READONLY", "FLUSHALL", "FLUSHDB", "DBSIZE", "TIME",
        "CONFIG", "CLIENT", "COMMAND", "HELLO", "AUTH", "SELECT", "WAIT", "LASTSAVE", "SAVE", "BGSAVE",
        "BGREWRITEAOF", "DEBUG", "LATENCY", "SLOWLOG", "PUBLISH", "SCAN", "KEYS", "RANDOMKEY", "MEMORY",
    ]
    /// Commands whose every argument is a key, and whose replies can be put together
    /// when the keys are split by slot: MGET's arrays concatenate, the others' counts add.
    static let splittable: Set<String> = ["MGET", "DEL", "UNLINK", "EXISTS", "TOUCH"]

    static func name(_ command: [[UInt8]]) -> String {
        guard let first = command.first else { return "" }
        return String(decoding: first, as: UTF8.self).uppercased()
    }

    /// Indexes of the command's keys (empty: no key).
    static func positions(_ command: [[UInt8]], name: String) -> [Int] {
        if keyless.contains(name) { return [] }
        switch name {
        case "EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO":
            guard command.count > 2, let count = Int(String(decoding: command[2], as: UTF8.self)), count > 0
            else { return [] }
            return Array(3..<min(command.count, 3 + min(count, command.count)))
        case "XREAD", "XREADGROUP":
            guard
                let streams = command.firstIndex(where: {
                    String(decoding: $0, as: UTF8.self).uppercased() == "STREAMS"
                })
            else { return [] }
            let rest = command.count - streams - 1
            return rest >= 2 ? Array((streams + 1)...(streams + rest / 2)) : []
        default:
            if splittable.contains(name) { return Array(command.indices.dropFirst()) }
            return command.count > 1 ? [1] : []
        }
    }
}

/// A client of a Redis Cluster: the slot map, learned with `CLUSTER SLOTS` from any
/// node it knows, a connection pool per master, and the redirections of the
/// specification — `MOVED` (the slot has a new owner: remember it and reload the map)
/// and `ASK` (this one key is being migrated: send `ASKING` and the command to the
/// importing node, once). `TRYAGAIN` and `CLUSTERDOWN` are retried after a short pause.
final class RedisCluster: Sendable {
    private struct SlotMap {
        /// Per slot, an index into `masters` (-1: no owner known).
        var owners: [Int16] = []
        var masters: [RedisNodeAddress] = []
        var loaded: Bool { !owners.isEmpty }

        func master(of slot: Int) -> RedisNodeAddress? {
            guard owners.indices.contains(slot) else { return nil }
            let owner = Int(owners[slot])
            return masters.indices.contains(owner) ? masters[owner] : nil
        }

        mutating func assign(_ slot: Int, to address: RedisNodeAddress) {
            guard owners.indices.contains(slot) else { return }
            if let index = masters.firstIndex(of: address) {
                owners[slot] = Int16(index)
            } else if masters.count < Int(Int16.max) {
                masters.append(address)
                owners[slot] = Int16(masters.count - 1)
            }
        }
    }

    /// One command as sent: the original, or part of a split one.
    private struct Part {
        var command: [[UInt8]]
        var slot: Int?
        /// Set by `ASK`: the node to try once, after `ASKING`.
        var asking: RedisNodeAddress?
    }

    /// How a command's reply is put together from its parts' replies.
    private enum Merge {
        case one(Int)
        /// MGET: each part's values go to these positions of the reply.
        case values([(part: Int, positions: [Int])], count: Int)
        /// DEL, UNLINK, EXISTS, TOUCH: the parts' counts add up.
        case sum([Int])
    }

    private let configuration: RedisConfiguration
    private let map = Mutex(SlotMap())
    private let pools = Mutex<[RedisNodeAddress: RedisPool]>([:])
    private let refreshing = Mutex<Task<Void, any Error>?>(nil)
    /// Redirections followed for one command before its error reply is returned as is.
    static let maxRedirections = 5

    init(configuration: RedisConfiguration) {
        self.configuration = configuration
    }

    var roundTrips: Int { pools.withLock { $0.values.reduce(0) { $0 + $1.roundTrips } } }

    func masters() async throws -> [RedisNodeAddress] {
        if !map.withLock({ $0.loaded }) { try await refresh() }
        return map.withLock { $0.masters }
    }

    private func pool(_ address: RedisNodeAddress) -> RedisPool {
        pools.withLock { pools in
            if let pool = pools[address] { return pool }
            let pool = RedisPool(configuration: configuration.node(address))
            pools[address] = pool
            return pool
        }
    }

    /// Reloads the slot map; concurrent callers share one reload.
    func refresh() async throws {
        let task = refreshing.withLock { current in
            if let current { return current }
            let task = Task { try await self.loadSlots() }
            current = task
            return task
        }
        defer { refreshing.withLock { if $0 == task { $0 = nil } } }
        try await task.value
    }

    private func loadSlots() async throws {
        var candidates = map.withLock { $0.masters }
        for node in [configuration.address] + configuration.seeds where !candidates.contains(node) {
            candidates.append(node)
        }
        var problems: [String] = []
        // Refused credentials or a failed TLS handshake say more than "cannot connect".
        var code = RedisError.Code.connect
        for node in candidates {
            do {
                let reply = try await pool(node).pipeline([[Array("CLUSTER".utf8), Array("SLOTS".utf8)]])[0]
                let fresh = try Self.slotMap(reply, askedNode: node)
                map.withLock { $0 = fresh }
                return
            } catch let error as RedisError {
                if [.tls, .auth, .authRequired].contains(error.code) { code = error.code }
                problems.append("\(node): \(error)")
            } catch {
                problems.append("\(node): \(error)")
            }
        }
        throw RedisError(code: code, message: "no cluster node gave its slot map: \(problems.joined(separator: "; "))")
    }

    /// Reads `CLUSTER SLOTS`: `[[first slot, last slot, [host, port, id, …], replicas…], …]`.
    private static func slotMap(_ reply: RedisValue, askedNode: RedisNodeAddress) throws -> SlotMap {
        if case .error(let message) = reply {
            throw RedisError(
                code: message.hasPrefix("NOAUTH") ? .authRequired : .replyError, message: "CLUSTER SLOTS: \(message)")
        }
        var map = SlotMap()
        map.owners = [Int16](repeating: -1, count: RedisSlot.count)
        for range in reply.array {
            let fields = range.array
            guard fields.count >= 3, let first = fields[0].int, let last = fields[1].int,
                first >= 0, first <= last, last < RedisSlot.count
            else { throw RedisError(code: .protocolError, message: "CLUSTER SLOTS: malformed slot range") }
            let node = fields[2].array
            guard node.count >= 2, let port = node[1].int, (1...65535).contains(port) else {
                throw RedisError(code: .protocolError, message: "CLUSTER SLOTS: malformed node")
            }
            // An empty or unknown host means "the node you asked".
            let host = node[0].string.flatMap { $0.isEmpty || $0 == "?" ? nil : $0 } ?? askedNode.host
            let address = RedisNodeAddress(host: host, port: Int(port))
            for slot in Int(first)...Int(last) { map.assign(slot, to: address) }
        }
        guard !map.masters.isEmpty else {
            throw RedisError(code: .protocolError, message: "CLUSTER SLOTS: no slot is served")
        }
        return map
    }

    func pipeline(_ commands: [[[UInt8]]]) async throws -> [RedisValue] {
        if !map.withLock({ $0.loaded }) { try await refresh() }
        var parts: [Part] = []
        var merges: [Merge] = []
        merges.reserveCapacity(commands.count)
        for command in commands {
            let name = CommandKeys.name(command)
            let positions = CommandKeys.positions(command, name: name)
            let slots = positions.map { RedisSlot.of(command[$0]) }
            guard CommandKeys.splittable.contains(name), Set(slots).count > 1 else {
                parts.append(Part(command: command, slot: slots.first))
                merges.append(.one(parts.count - 1))
                continue
            }
            // Keys in several slots: one command per slot, keys in their order.
            var bySlot: [(slot: Int, positions: [Int])] = []
            for (keyIndex, slot) in slots.enumerated() {
                if let existing = bySlot.firstIndex(where: { $0.slot == slot }) {
                    bySlot[existing].positions.append(keyIndex)
                } else {
                    bySlot.append((slot, [keyIndex]))
                }
            }
            var pieces: [(part: Int, positions: [Int])] = []
            for group in bySlot {
                parts.append(
                    Part(command: [command[0]] + group.positions.map { command[positions[$0]] }, slot: group.slot))
                pieces.append((parts.count - 1, group.positions))
            }
            merges.append(name == "MGET" ? .values(pieces, count: slots.count) : .sum(pieces.map(\.part)))
        }
        let replies = try await send(parts)
        return merges.map { merge in
            switch merge {
            case .one(let part):
                return replies[part]
            case .values(let pieces, let count):
                var values = [RedisValue](repeating: .null, count: count)
                for piece in pieces {
                    if case .error = replies[piece.part] { return replies[piece.part] }
                    for (value, position) in zip(replies[piece.part].array, piece.positions) {
                        values[position] = value
                    }
                }
                return .array(values)
            case .sum(let pieces):
                var total: Int64 = 0
                for part in pieces {
                    if case .error = replies[part] { return replies[part] }
                    total = total.addingReportingOverflow(replies[part].int ?? 0).partialValue
                }
                return .int(total)
            }
        }
    }

    /// Sends every part to its node, in one pipeline per node, the nodes concurrently;
    /// follows redirections until each part has its answer.
    private func send(_ initial: [Part]) async throws -> [RedisValue] {
        var parts = initial
        var replies = [RedisValue](repeating: .null, count: parts.count)
        var waiting = Array(parts.indices)
        var redirections = 0
        var moved = false
        while !waiting.isEmpty {
            let routes: [RedisNodeAddress: [Int]] = map.withLock { map in
                var routes: [RedisNodeAddress: [Int]] = [:]
                for index in waiting {
                    let part = parts[index]
                    let target = part.asking ?? part.slot.flatMap { map.master(of: $0) } ?? map.masters.first
                    if let target { routes[target, default: []].append(index) }
                }
                return routes
            }
            guard routes.values.reduce(0, { $0 + $1.count }) == waiting.count else {
                try await refresh()
                throw RedisError(code: .connect, message: "no master is known for some slots")
            }
            let answers: [(node: RedisNodeAddress, indexes: [Int], replies: [RedisValue])]
            func commands(_ indexes: [Int]) -> [[[UInt8]]] {
                indexes.flatMap { index -> [[[UInt8]]] in
                    parts[index].asking == nil
                        ? [parts[index].command] : [[Array("ASKING".utf8)], parts[index].command]
                }
            }
            do {
                if routes.count == 1, let (node, indexes) = routes.first {
                    // One master (every single-key command): no task group needed.
                    answers = [(node, indexes, try await pool(node).pipeline(commands(indexes)))]
                } else {
                    answers = try await withThrowingTaskGroup(of: (RedisNodeAddress, [Int], [RedisValue]).self) {
                        group in
                        for (node, indexes) in routes {
                            let commands = commands(indexes)
                            let pool = pool(node)
                            group.addTask { (node, indexes, try await pool.pipeline(commands)) }
                        }
                        return try await group.reduce(into: []) { $0.append(($1.0, $1.1, $1.2)) }
                    }
                }
            } catch {
                // A node went away (a failover, a resharding): learn the new map for the
                // next call; this one fails as a connection problem (callers retry).
                try? await refresh()
                throw error
            }
            var next: [Int] = []
            var pause = false
            for (node, indexes, nodeReplies) in answers {
                var cursor = 0
                for index in indexes {
                    if parts[index].asking != nil { cursor += 1 }  // ASKING's +OK
                    guard nodeReplies.indices.contains(cursor) else {
                        throw RedisError(code: .protocolError, message: "fewer replies than commands")
                    }
                    let reply = nodeReplies[cursor]
                    cursor += 1
                    parts[index].asking = nil
                    replies[index] = reply
                    guard case .error(let message) = reply, redirections < Self.maxRedirections else { continue }
                    switch Redirection(message, from: node) {
                    case .moved(let slot, let address):
                        map.withLock { $0.assign(slot, to: address) }
                        // The slot Redis names: right even when the key was not found where expected.
                        parts[index].slot = slot
                        moved = true
                        next.append(index)
                    case .ask(_, let address):
                        parts[index].asking = address
                        next.append(index)
                    case .tryAgain:
                        pause = true
                        next.append(index)
                    case nil:
                        break
                    }
                }
            }
            if !next.isEmpty {
                redirections += 1
                if pause { try await Task.sleep(for: .milliseconds(50)) }
            }
            waiting = next.sorted()
        }
        if moved { try? await refresh() }
        return replies
    }
}

/// A cluster's error replies that say to send the command again, elsewhere or later.
enum Redirection: Equatable {
    case moved(slot: Int, RedisNodeAddress)
    case ask(slot: Int, RedisNodeAddress)
    /// `TRYAGAIN` (a multi-key command during a migration) or `CLUSTERDOWN`.
    case tryAgain

    /// `from`: the node that answered; an address without a host means that node's host.
    init?(_ message: String, from node: RedisNodeAddress) {
        let words = message.split(separator: " ")
        guard let kind = words.first else { return nil }
        switch kind {
        case "MOVED", "ASK":
            guard words.count == 3, let slot = Int(words[1]), (0..<RedisSlot.count).contains(slot),
                var address = RedisNodeAddress(words[2])
            else { return nil }
            if address.host.isEmpty { address.host = node.host }
            self = kind == "MOVED" ? .moved(slot: slot, address) : .ask(slot: slot, address)
        case "TRYAGAIN", "CLUSTERDOWN":
            self = .tryAgain
        default:
            return nil
        }
    }
}
