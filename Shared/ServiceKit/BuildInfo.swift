import Foundation
import Metrics

/// What a binary is: its release (semantic versioning, 0.x until the wire formats and
/// settings are declared stable) and the commit it was built from. `version` is
/// written by `make release` (scripts/release.sh) with VERSION, the CHANGELOG and the
/// Kubernetes labels; scripts/check-version.sh keeps them equal. The revision is the
/// image's (`PUSHRELAY_BUILD_REVISION`, set by the Dockerfile from its `REVISION`
/// build argument), `unknown` in a development build.
public enum BuildInfo {
    public static let version = "0.1.0"

    public static var revision: String {
        let value = ProcessInfo.processInfo.environment["PUSHRELAY_BUILD_REVISION"] ?? ""
        // A commit id, or a name: letters, digits, `.`, `-`, `_`, at most 64 bytes.
        let ok =
            !value.isEmpty && value.utf8.count <= 64
            && value.utf8.allSatisfy { b in
                (0x30...0x39).contains(b) || (0x41...0x5a).contains(b) || (0x61...0x7a).contains(b)
                    || b == UInt8(ascii: ".") || b == UInt8(ascii: "-") || b == UInt8(ascii: "_")
            }
        return ok ? value : "unknown"
    }

    /// `<name> <version> (<revision>)`, what `--version` prints.
    public static func line(_ name: String) -> String { "\(name) \(version) (\(revision))" }

    /// Answers `--version` (alone, as the only argument) and exits; otherwise returns.
    /// Every binary without an argument parser calls it first.
    public static func answerVersionFlag() {
        let arguments = CommandLine.arguments
        guard arguments.count == 2, arguments[1] == "--version" || arguments[1] == "-V" else { return }
        let name = (arguments[0] as NSString).lastPathComponent
        print(line(name))
        exit(0)
    }

    /// `pushrelay_build_info{version,revision} 1`, so dashboards see which release runs
    /// (and a rolling upgrade shows both side by side).
    static func recordMetric() {
        Gauge(label: "pushrelay_build_info", dimensions: [("version", version), ("revision", revision)]).record(1)
    }
}
