import DevStack
import Foundation
import Testing

/// The test stacks' ports: a port handed out once is not handed out again in this
/// process. The kernel offers a closed probe's port again (300 draws from the ~14,000
/// ports it hands out for binds to port 0 repeat one with odds of about 96 %), and
/// two processes of a stack given one port race for it: CI once lost its dispatcher so,
/// and the readiness probe found ingest's ops listener on the port.
@Suite struct StackPortTests {
    @Test func freePortsAreNeverHandedOutTwice() throws {
        var seen = Set<Int>()
        for _ in 0..<300 {
            let port = try Stack.freePort()
            #expect((1024...65535).contains(port))
            #expect(seen.insert(port).inserted, "port \(port) handed out twice")
        }
    }
}

extension StackTests {
    /// A service whose port another process took before it bound it is started again
    /// on new ports.
    @Suite struct StackPortRetryTests {
        @Test func aServiceWhosePortWasTakenStartsOnANewOne() async throws {
            var options = Stack.Options.tests
            options.name = "ports"
            options.partitions = 2
            let stack = try await Stack.start(options: options)
            // Stopped when done: an idle stack still polls.
            defer { for pid in stack.pids().values { kill(pid, SIGTERM) } }
            let taken = try #require(stack.ports[.dispatcher])
            try await stack.stop(.dispatcher, signal: SIGKILL)
            // Another process binds the dispatcher's port first.
            let listener = try Stack.silentListener(port: taken)
            defer { close(listener.fd) }
            try stack.start(.dispatcher)
            try await stack.waitReadyOnItsPorts(.dispatcher)
            // Moved only after it exited with "Address already in use" (the log is rewritten
            // by the new start).
            #expect(stack.ports[.dispatcher] != taken)
            #expect((try await HTTP.get("\(stack.opsURL(.dispatcher))/health/ready")).status == 200)
        }
    }
}
