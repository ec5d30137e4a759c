import FeedbackCore
import ServiceKit

// feedback: read the configuration, build the stage, run it (FeedbackCore).
await runMain { try await Feedback.run(FeedbackConfiguration(reader: .environment())) }
