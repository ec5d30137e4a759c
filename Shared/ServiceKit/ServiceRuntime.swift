import Foundation
import NIOCore
import NIOPosix

#if canImport(Glibc)
    import Glibc
#endif

/// How a service process runs: set up first thing in `main`, before any task starts.
public enum ServiceRuntime {
    /// - Swift concurrency's jobs run on NIO's event loops (unless
    ///   `PUSHRELAY_EXECUTOR=pool`), so a task that awaits a socket (Redis, a provider,
    ///   an HTTP request, a Kafka acknowledgement) resumes on the loop that owns it
    ///   instead of hopping between the cooperative pool and the loops: most of the
    ///   context switches a notification cost. `PUSHRELAY_EVENT_LOOPS` (1–256) sets the
    ///   number of loops; the default is one per core.
    /// - glibc keeps at most two malloc arenas (`PUSHRELAY_MALLOC_ARENAS`, 1–64): one per
    ///   thread that ever allocated is most of a service's idle memory.
    public static func install() {
        let environment = ProcessInfo.processInfo.environment
        #if canImport(Glibc)
            let arenas = environment["PUSHRELAY_MALLOC_ARENAS"].flatMap { Int32($0) }.flatMap {
                (1...64).contains($0) ? $0 : nil
            }
            // mallopt(M_ARENA_MAX, n): <malloc.h> is not in Glibc's module, so look it up.
            if let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "mallopt") {
                typealias Mallopt = @convention(c) (Int32, Int32) -> Int32
                let mArenaMax: Int32 = -8
                _ = unsafeBitCast(symbol, to: Mallopt.self)(mArenaMax, arenas ?? 2)
            }
        #endif
        if let text = environment["PUSHRELAY_EVENT_LOOPS"], let loops = Int(text), (1...256).contains(loops) {
            NIOSingletons.groupLoopCountSuggestion = loops
        }
        if environment["PUSHRELAY_EXECUTOR"] == "pool" { return }
        NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()
    }
}
