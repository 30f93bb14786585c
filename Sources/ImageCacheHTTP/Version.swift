// The daemon's version: `imagecached --version`, the default User-Agent sent upstream, the stats and the log.

public let imagecachedVersion = "0.1.0"
