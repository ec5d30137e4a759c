import HTTPTypes
import ServiceKit
import Testing
@testable import StageTestSupport

/// `HTTPFields.value`, `values` and `set` answer as the subscripts they replace.
@Suite struct HeaderAccessTests {
    static let custom = HTTPField.Name("X-Custom")!

    static let samples: [HTTPFields] = [
        [:],
        [.authorization: "Basic abc"],
        [.contentType: "application/json", .contentLength: "12"],
        // Several fields of one name, and names that differ only in case.
        HTTPFields([
            HTTPField(name: custom, value: "a"), HTTPField(name: .contentType, value: "text/plain"),
            HTTPField(name: HTTPField.Name("x-custom")!, value: "b"), HTTPField(name: custom, value: ""),
        ]),
        HTTPFields([HTTPField(name: .cookie, value: "a=1"), HTTPField(name: .cookie, value: "b=2")]),
    ]

    @Test(arguments: samples)
    func readsAnswerAsTheSubscripts(_ fields: HTTPFields) {
        for name in [Self.custom, .authorization, .contentType, .contentLength, .cookie, .connection] {
            #expect(fields.value(name) == fields[name], "\(name) in \(fields)")
            #expect(fields.values(name) == fields[values: name], "\(name) in \(fields)")
        }
    }

    @Test(arguments: samples)
    func setAnswersAsTheSubscript(_ fields: HTTPFields) {
        for name in [Self.custom, .contentType, .server, .cookie] {
            var viaSet = fields
            viaSet.set(name, "v=1; w=2")
            var viaSubscript = fields
            viaSubscript[name] = "v=1; w=2"
            // Field by field, in order (`==` on HTTPFields ignores how names interleave).
            #expect(
                viaSet.map { [$0.name.rawName, $0.value] } == viaSubscript.map { [$0.name.rawName, $0.value] },
                "\(name) in \(fields)")
            #expect(viaSet.value(name) == viaSubscript[name])
        }
    }
}
