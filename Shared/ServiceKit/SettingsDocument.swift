/// docs/configuration.md, rendered from the catalog: `pushrelay settings` prints it,
/// `make docs` writes it, and a test fails when the file in the repository differs.
extension SettingsCatalog {
    public static func markdown() -> String {
        var lines = [
            "# Configuration",
            "",
            "<!-- Generated from Shared/ServiceKit/SettingsCatalog*.swift by `make docs`. Do not edit by hand:",
            "     ReadmeConfigurationTests fails when this file and the catalog differ. -->",
            "",
            "Every setting of the four services, with its default and who reads it. The request",
            "limits, connection deadlines and secret files are explained in",
            "[security.md](security.md); how the stages use them in [architecture.md](architecture.md).",
            "The dev tools' own settings (`devbroker`, `provider-fakes`) are not here: they are in",
            "[CONTRIBUTING.md](../CONTRIBUTING.md#the-dev-stacks-tools).",
            "",
            "All settings come from the environment, read once at start through",
            "[swift-configuration](https://github.com/apple/swift-configuration) by one",
            "configuration type per executable (`IngestConfiguration`, `EncryptorConfiguration`,",
            "`DispatcherConfiguration`, `FeedbackConfiguration`, each built by a throwing",
            "`init(reader:)`). Every value is checked against the catalog as it is read: a value",
            "that makes no sense stops the process at start (exit status 78) with a message naming",
            "the variable, never a silent default, and unknown `PUSHRELAY_` names are logged as",
            "likely typos. The brokers and the secret files have **no default**: a service without",
            "them does not start. Only the dev stack (`make up`, the tests) points them at `.run/`.",
            "Secrets come from files. `pushrelay settings` prints this page.",
            "",
        ]
        lines.append(contentsOf: sections.map { "- [\($0.title)](#\(anchor($0.title)))" })
        for section in sections {
            lines += [
                "", "## \(section.title)", "", section.summary, "", "| variable | default | used by |", "|---|---|---|",
            ]
            for setting in section.settings {
                let about = setting.about.isEmpty ? "" : "\(setting.about) "
                lines.append("| `\(environmentName(setting.key))` | \(setting.defaultValue) | \(about)|")
            }
        }
        lines += [
            "",
            "## Not settings",
            "",
            "The test harness reads `PUSHRELAY_BIN_DIR` (where the built executables are), and",
            "`PUSHRELAY_BUILD_REVISION` is the image's build revision (`BuildInfo`). The dev tools'",
            "own variables start with `PUSHRELAY_FAKES_`, `PUSHRELAY_DEVBROKER_`, `PUSHRELAY_FUZZ_`",
            "or `PUSHRELAY_BENCH_`.",
            "",
        ]
        return lines.joined(separator: "\n")
    }

    /// GitHub's anchor for a heading: lower case, spaces as `-`, punctuation dropped.
    static func anchor(_ title: String) -> String {
        String(
            title.lowercased().compactMap { character -> Character? in
                if character == " " { return "-" }
                return character.isLetter || character.isNumber || character == "-" ? character : nil
            })
    }
}
