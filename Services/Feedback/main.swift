import FeedbackCore
import ServiceKit

// feedback: read the configuration, build the stage, run it (FeedbackCore).
ServiceRuntime.install()
await runMain { try await Feedback.run(FeedbackConfiguration(reader: .environment())) }
