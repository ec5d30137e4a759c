import DevStack
import Testing

/// Every test that drives the shared stack, one at a time: they share the provider
/// fakes, so a test injecting provider failures must not overlap another's deliveries.
@Suite(.serialized, .timeLimit(.minutes(15)))
struct StackTests {}
