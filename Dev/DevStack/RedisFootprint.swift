import Foundation

/// What the stack's Redis holds: its `used_memory`, and the bytes of the send ledger's
/// keys (`*sl:*`) as `MEMORY USAGE` counts them, read in one script through `redis-cli` (`RedisCLI`).
struct RedisFootprint {
    var usedMemory: Int64
    var ledgerBytes: Int64

    /// Sums `MEMORY USAGE` over a SCAN of the pattern; returns used_memory and those bytes.
    static let script = """
        local cursor, bytes = '0', 0
        repeat
          local r = redis.call('SCAN', cursor, 'MATCH', ARGV[1], 'COUNT', 1000)
          cursor = r[1]
          for _, k in ipairs(r[2]) do
            bytes = bytes + (redis.call('MEMORY', 'USAGE', k) or 0)
          end
        until cursor == '0'
        local used = tonumber(string.match(redis.call('INFO', 'memory'), 'used_memory:(%d+)'))
        return {used, bytes}
        """

    /// Nil when redis-cli is missing or Redis does not answer (a secured or clustered
    /// stack: the benchmark's is neither).
    static func read(port: Int) -> RedisFootprint? {
        let output = RedisCLI.run(port: port, tls: nil, acl: nil, ["EVAL", script, "0", "*sl:*"]) ?? ""
        let numbers = output.split(whereSeparator: \.isNewline).compactMap {
            Int64($0.trimmingCharacters(in: .whitespaces))
        }
        guard numbers.count == 2 else { return nil }
        return RedisFootprint(usedMemory: numbers[0], ledgerBytes: numbers[1])
    }
}
