import EncryptorCore
import ServiceKit

// encryptor: read the configuration, build the stage, run it (EncryptorCore).
ServiceRuntime.install()
await runMain { try await Encryptor.run(EncryptorConfiguration(reader: .environment())) }
