import DevStack
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
