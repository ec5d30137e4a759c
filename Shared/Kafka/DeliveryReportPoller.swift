import CRdKafka
import NIOCore
import NIOPosix

#if canImport(Glibc)
    import Glibc
#endif

/// Serves a producer's delivery reports on an event loop instead of a thread of their
/// own: librdkafka writes a byte to a pipe when its main queue gets work
/// (`rd_kafka_queue_io_event_enable`), the loop reads it and polls without waiting, so
/// the sender's task resumes on that loop with no extra thread switch. A poll every
/// 100 ms covers anything the pipe does not announce.
final class DeliveryReportPoller: Sendable {
    private let channel: EventLoopFuture<any Channel>
    private let tick: RepeatedTask

    /// The pipe the queue announces work on: librdkafka writes to `write` (never
    /// blocking), the poller owns `read`.
    static func makePipe() throws(KafkaError) -> (read: Int32, write: Int32) {
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else {
            throw KafkaError(code: .closed, message: "cannot create the delivery-report pipe (errno \(errno))")
        }
        for fd in fds {
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        }
        return (fds[0], fds[1])
    }

    init(core: ProducerCore, readFD: Int32, loop: any EventLoop) {
        channel = NIOPipeBootstrap(group: loop)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(Announcement(core: core))
                }
            }
            .takingOwnershipOfDescriptor(input: readFD)
        tick = loop.scheduleRepeatedTask(initialDelay: .milliseconds(100), delay: .milliseconds(100)) { _ in
            core.serve()
        }
    }

    /// Stops polling; the core (and with it the handle) is released once the pipe closes.
    func stop() {
        tick.cancel()
        channel.whenSuccess { $0.close(promise: nil) }
    }

    private final class Announcement: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        let core: ProducerCore

        init(core: ProducerCore) { self.core = core }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            core.serve()
        }
    }
}

extension ProducerCore {
    /// Runs the delivery-report callbacks of everything queued, without waiting.
    func serve() {
        guard running.isSet else { return }
        // Each call serves what is queued; a few more catch reports that arrive meanwhile.
        var rounds = 0
        while rounds < 8, rd_kafka_poll(handle.pointer, 0) > 0 { rounds += 1 }
    }
}
