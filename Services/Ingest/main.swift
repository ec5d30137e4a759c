import IngestCore
import ServiceKit

// ingest: read the configuration, build the API, serve it (IngestCore).
ServiceRuntime.install()
await runMain { try await Ingest.run(IngestConfiguration(reader: .environment())) }
