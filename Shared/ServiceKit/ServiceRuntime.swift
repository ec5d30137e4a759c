import Foundation
import NIOCore
import NIOPosix

#if canImport(Glibc)
    import Glibc
#endif

/// How a service process runs: set up first thing in `main`, before any task starts.
public enum ServiceRuntime {
    /// The event loops of this process (`PUSHRELAY_EVENT_LOOPS`, after `install()`).
    public static var eventLoops: Int { max(1, NIOSingletons.groupLoopCountSuggestion) }

    /// - Swift concurrency's jobs run on NIO's event loops (unless
    ///   `PUSHRELAY_EXECUTOR=pool`), so a task that awaits a socket (Redis, a provider,
    ///   an HTTP request, a Kafka acknowledgement) resumes on the loop that owns it
    ///   instead of hopping between the cooperative pool and the loops: most of the
    ///   context switches a notification cost. `PUSHRELAY_EVENT_LOOPS` (1–256) sets the
    ///   number of loops; the default is one, so a process's work stays on one thread
    ///   (no hand-over between loops, one malloc arena in use) and a stage scales by
    ///   replicas, each asking for a share of a core (deploy/base). At 1,000
    ///   notifications/s on 2 cores one loop per service took no more CPU than two and
    ///   the dispatcher 2–8 MiB less memory (benchmarks/history/19-issue-27-part-3-threads-and-requests.md).
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
        } else {
            NIOSingletons.groupLoopCountSuggestion = 1
        }
        // Values out of range are refused (exit 78) when the configuration is read.
        if environment["PUSHRELAY_EXECUTOR"] == "pool" { return }
        LoopsAsGlobalExecutor.install()
    }
}

/// Swift concurrency's global executor replaced by NIO's event loops, as
/// `NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()`
/// does, with one difference that callgrind showed matters: NIO runs each job as if on
/// the loop's serial executor, so every call into a nonisolated async function (most of
/// them) is a switch to the generic executor and back, an enqueue through the loop's
/// task queue each time (~150 per notification in ingest). Here a job runs as the
/// generic executor's, as Swift's own global executor runs it, so those calls continue
/// inline. A job goes to the loop it was enqueued from (a resumed continuation continues
/// where its socket is), else to the next loop.
enum LoopsAsGlobalExecutor {
    private typealias EnqueueGlobalHook = @convention(thin) (UnownedJob, @convention(thin) (UnownedJob) -> Void) -> Void
    /// `swift_job_run(job, executor)`, how Swift's own global executor runs a job; the
    /// executor reference is two words (identity, implementation), passed as such.
    private typealias JobRun = @convention(c) (UnsafeMutableRawPointer, UInt, UInt) -> Void
    private static let jobRun: JobRun? = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "swift_job_run").map {
        unsafeBitCast($0, to: JobRun.self)
    }

    static func install() {
        // The runtime's hook variable, as NIO finds it.
        guard jobRun != nil, let hook = dlsym(dlopen(nil, RTLD_NOW), "swift_task_enqueueGlobal_hook") else {
            NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()
            return
        }
        // As NIO does it: the thin function's pointer, written into the hook.
        withUnsafeTemporaryAllocation(of: EnqueueGlobalHook.self, capacity: 1) { slot in
            guard let base = slot.baseAddress else { return }
            base.initialize(to: { job, _ in LoopsAsGlobalExecutor.enqueue(job) })
            let function = base.withMemoryRebound(to: UnsafeRawPointer.self, capacity: 1) { $0.pointee }
            hook.storeBytes(of: function, as: UnsafeRawPointer.self)
        }
    }

    private static func enqueue(_ job: UnownedJob) {
        let loop = MultiThreadedEventLoopGroup.currentEventLoop ?? MultiThreadedEventLoopGroup.singleton.next()
        loop.execute { runJob(job) }
    }

    /// Runs a job as the generic executor's (no identity, no implementation).
    private static func runJob(_ job: UnownedJob) {
        jobRun?(unsafeBitCast(job, to: UnsafeMutableRawPointer.self), 0, 0)
    }
}
