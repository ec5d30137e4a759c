import HTTPTypes

/// Header reads and writes on the request path without `HTTPFields`' subscripts, which
/// gather a name's fields through unspecialized generic code and join them into a new
/// string: ~4,500 instructions a lookup, five lookups a notify (~4 % of ingest's
/// instructions, benchmarks/history/21-issue-27-part-5-ingest-transport.md). These scan the fields once and
/// give the same answers. (`contains(_:)` is a plain scan already.)
extension HTTPFields {
    /// `self[name]`: the value of `name`'s field, or all of them joined as the
    /// subscript joins them when there are several; nil when there is none.
    @inlinable
    public func value(_ name: HTTPField.Name) -> String? {
        var found: String?
        for field in self where field.name == name {
            // Several: as the subscript joins them (rare; no need to be quick).
            guard found == nil else { return self[name] }
            found = field.value
        }
        return found
    }

    /// `self[values: name]`: the values of `name`'s fields, in order.
    @inlinable
    public func values(_ name: HTTPField.Name) -> [String] {
        var values: [String] = []
        for field in self where field.name == name { values.append(field.value) }
        return values
    }

    /// `self[name] = value`: appended when `name` has no field yet (the usual case),
    /// else through the subscript, which replaces them (and splits a Cookie).
    @inlinable
    public mutating func set(_ name: HTTPField.Name, _ value: String) {
        if name == .cookie || contains(name) {
            self[name] = value
        } else {
            append(HTTPField(name: name, value: value))
        }
    }
}
