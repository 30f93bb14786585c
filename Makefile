.PHONY: build test bench

build:
	swift build -c release

test:
	scripts/test

# Compare imagecached with nginx proxy_cache and Varnish; writes bench/results/<date>.md (see bench/README.md).
bench:
	bench/run
