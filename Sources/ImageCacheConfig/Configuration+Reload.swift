// What a reload (SIGHUP) reports and keeps: the restart-only keys (ConfigKey.reload), compared and kept per key.


extension Configuration {
    /// The keys whose new value is not applied by a reload (they need a restart), as "key: old -> new".
    public func restartOnlyChanges(to next: Configuration) -> [String] {
        ConfigKey.all.compactMap { key in key.restartField?.change(self, next).map { "\(key.name): \($0)" } }
    }

    /// Takes the restart-only keys from `running`, keeping this configuration's reloadable ones.
    package mutating func keepRestartOnlySettings(of running: Configuration) {
        for key in ConfigKey.all { key.restartField?.keep(&self, running) }
    }
}
