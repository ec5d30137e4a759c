import NIOHPACK
import Testing

@testable import Providers

/// `Retry-After` is a provider's number: read as ASCII digits, capped at a day.
@Suite struct RetryAfterTests {
    func parsed(_ value: String) -> Duration? {
        retryAfter(HPACKHeaders([("retry-after", value)]))
    }

    @Test func secondsAreReadAndCapped() {
        #expect(parsed("30") == .seconds(30))
        #expect(parsed(" 5 ") == .seconds(5))
        #expect(parsed("99999999999999999999") == nil, "past UInt64: not a number we read")
        #expect(parsed("18446744073709551615") == .seconds(86_400))
        #expect(parsed("9223372036854775807") == .seconds(86_400))
        #expect(parsed("-5") == nil)
        #expect(parsed("1e9") == nil)
        #expect(parsed("٣٠") == nil)
        #expect(parsed("Wed, 21 Oct 2015 07:28:00 GMT") == nil)
    }
}
