import DispatcherCore
import ServiceKit

// dispatcher: read the configuration, build the stage, run it (DispatcherCore).
ServiceRuntime.install()
await runMain { try await Dispatcher.run(DispatcherConfiguration(reader: .environment())) }
