// Logging setup: swift-log with one handler writing to standard error (journald adds time and unit).

public import Logging

public enum DaemonLogging {
    /// A logger labelled "imagecached" at `level` ("info", "debug", ...), writing to standard error.
    public static func makeLogger(level: String) -> Logger {
        var logger = Logger(label: "imagecached") { label in StreamLogHandler.standardError(label: label) }
        logger.logLevel = Logger.Level(rawValue: level) ?? .info
        return logger
    }
}
