// The daemon's own command line, derived from the table of keys (ConfigKeys.swift): `--config FILE`, and one flag
// per key that may be a flag, `--KEY VALUE` or `--KEY=VALUE` (switches such as `--disk-fsync` take no value, or
// `=false`). Its --help is rendered from the same table, so every flag is listed with its default. Subcommands
// (purge, stats, prefetch, config, sign) are main.swift's.

internal import Foundation

public enum DaemonCommandLine {
    public enum Parsed: Equatable, Sendable {
        case help
        case version
        /// Run the daemon with this configuration file (if any) and these flags, in the order given.
        case run(config: String?, flags: [ConfigSetting])
    }

    /// Reads the arguments (without the program name). A bad flag is a ConfigError naming it.
    public static func parse(_ arguments: [String]) throws(ConfigError) -> Parsed {
        var config: String?
        var flags: [ConfigSetting] = []
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            if argument == "-h" || argument == "--help" { return .help }
            if argument == "--version" { return .version }
            guard argument.hasPrefix("--") else {
                // Named up to any "=": a mistyped -admin-token=SECRET must not print the secret.
                throw ConfigError(key: String(argument.prefix { $0 != "=" }), reason: "unexpected argument (flags are --KEY VALUE; see --help)")
            }
            let name: String, inline: String?
            if let equals = argument.firstIndex(of: "=") {
                name = String(argument[..<equals])
                inline = String(argument[argument.index(after: equals)...])
            } else {
                (name, inline) = (argument, nil)
            }
            let key = ConfigKey.all.first { $0.flag == name }
            guard name == "--config" || key != nil else {
                throw ConfigError(key: name, reason: "unknown flag (see --help)")
            }
            let value: String
            if let inline {
                value = inline
            } else if let key, key.isSwitch {
                // Bare: true; or one of its words as the next argument (`--require-signature auto`).
                if index < arguments.count, key.switchWords.contains(arguments[index].lowercased()) {
                    value = arguments[index]
                    index += 1
                } else {
                    value = "true"
                }
            } else {
                // The next argument is the value, unless it is another flag (give --KEY=--x for such a value).
                guard index < arguments.count, !arguments[index].hasPrefix("--") else {
                    throw ConfigError(key: name, reason: "needs a value (\(key?.form ?? "FILE"))")
                }
                value = arguments[index]
                index += 1
            }
            if let key {
                flags.append(ConfigSetting(key: key.name, value: .scalar(value), source: name))
            } else {
                config = value
            }
        }
        return .run(config: config, flags: flags)
    }

    /// The --help text: usage, every flag with its form, meaning and default, the keys that are not flags, and the
    /// subcommands (name, one line each).
    public static func help(abstract: String, subcommands: [(name: String, abstract: String)]) -> String {
        var text = """
            OVERVIEW: \(abstract)

            USAGE: imagecached [--config FILE] [--KEY VALUE ...]
                   imagecached <subcommand> [...]

            Settings come from the defaults, then the configuration file (--config, or $IMAGECACHED_CONFIG), then \
            environment variables (IMAGECACHED_ + the key upper-cased, "." and "-" as "_", e.g. \
            IMAGECACHED_MEMORY_LIMIT), then these flags: flags win. Sizes take KiB/MiB/GiB (1024) or KB/MB/GB (1000); \
            durations take ms, s, m, h, d (plain numbers are seconds). Keys marked "restart only" keep their running \
            value on a reload (SIGHUP).

            OPTIONS:
              --config FILE
                    Configuration file (YAML). Default: none, or $IMAGECACHED_CONFIG.

            """
        for key in ConfigKey.all {
            guard let flag = key.flag else { continue }
            text += "  \(key.flagUsage ?? flag)\n"
            text += "        \(sentence(key.meaning)) Default: \(key.defaultText).\(key.reload == .restart ? " Restart only." : "")\n"
        }
        text += """
              --version
                    Show the version.
              -h, --help
                    Show this help.

            NOT FLAGS (they would show in ps, or are structured):

            """
        for key in ConfigKey.all where key.flag == nil {
            let where_ = key.environmentVariable.map { "the file or \($0)" } ?? "the file only"
            text += "  \(key.name) (\(where_)): \(key.meaning).\n"
        }
        text += "\nSUBCOMMANDS:\n"
        let width = subcommands.map(\.name.count).max() ?? 0
        for (name, abstract) in subcommands {
            text += "  \(name.padding(toLength: width, withPad: " ", startingAt: 0))  \(abstract)\n"
        }
        text += "\n  See 'imagecached help <subcommand>' for a subcommand's options.\n"
        return text
    }

    /// "address to serve on" -> "Address to serve on."
    private static func sentence(_ meaning: String) -> String {
        guard let first = meaning.first else { return meaning }
        return first.uppercased() + meaning.dropFirst() + "."
    }
}
