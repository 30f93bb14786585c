.PHONY: build test bench install uninstall

PREFIX ?= /usr/local
DESTDIR ?=
BINDIR ?= $(PREFIX)/bin
SYSCONFDIR ?= /etc
# systemd looks for units of packages installed under /usr/local in /usr/local/lib/systemd/system too.
SYSTEMDUNITDIR ?= $(PREFIX)/lib/systemd/system
DOCDIR ?= $(PREFIX)/share/doc/imagecached
# The binary to install; by default the release build (made first).
BINARY ?=

build:
	swift build -c release

test:
	scripts/test

# Compare imagecached with nginx proxy_cache and Varnish; writes bench/results/<date>.md (see bench/README.md).
bench:
	bench/run

# Installs the release binary, the systemd units (ExecStart pointing at $(BINDIR)), the default configuration
# (kept when one is already there) and the manual (README.md and docs/). DESTDIR stages into a root for packaging;
# BINARY=path installs that binary instead of making a release build.
install: $(if $(BINARY),,build)
	install -D -m 0755 "$(or $(BINARY),$$(swift build -c release --show-bin-path)/imagecached)" "$(DESTDIR)$(BINDIR)/imagecached"
	install -d "$(DESTDIR)$(SYSTEMDUNITDIR)"
	sed -e 's|/usr/local/bin/imagecached|$(BINDIR)/imagecached|' -e 's|/usr/local/share/doc/imagecached|$(DOCDIR)|' \
		-e 's|/etc/imagecached/|$(SYSCONFDIR)/imagecached/|' \
		systemd/imagecached.service > "$(DESTDIR)$(SYSTEMDUNITDIR)/imagecached.service"
	sed -e 's|/usr/local/share/doc/imagecached|$(DOCDIR)|' -e 's|/etc/imagecached/|$(SYSCONFDIR)/imagecached/|' \
		systemd/imagecached.socket > "$(DESTDIR)$(SYSTEMDUNITDIR)/imagecached.socket"
	sed -e 's|/usr/local/share/doc/imagecached|$(DOCDIR)|' -e 's|/etc/imagecached/|$(SYSCONFDIR)/imagecached/|' \
		systemd/imagecached-tls.socket > "$(DESTDIR)$(SYSTEMDUNITDIR)/imagecached-tls.socket"
	chmod 0644 "$(DESTDIR)$(SYSTEMDUNITDIR)/imagecached.service" "$(DESTDIR)$(SYSTEMDUNITDIR)/imagecached.socket" \
		"$(DESTDIR)$(SYSTEMDUNITDIR)/imagecached-tls.socket"
	install -d "$(DESTDIR)$(SYSCONFDIR)/imagecached"
	[ -e "$(DESTDIR)$(SYSCONFDIR)/imagecached/imagecached.yaml" ] || \
		install -m 0644 Config/imagecached.yaml "$(DESTDIR)$(SYSCONFDIR)/imagecached/imagecached.yaml"
	install -D -m 0644 README.md "$(DESTDIR)$(DOCDIR)/README.md"
	install -d "$(DESTDIR)$(DOCDIR)/docs"
	install -m 0644 docs/*.md docs/*.png "$(DESTDIR)$(DOCDIR)/docs/"

uninstall:
	rm -f "$(DESTDIR)$(BINDIR)/imagecached" "$(DESTDIR)$(SYSTEMDUNITDIR)/imagecached.service" \
		"$(DESTDIR)$(SYSTEMDUNITDIR)/imagecached.socket" "$(DESTDIR)$(SYSTEMDUNITDIR)/imagecached-tls.socket" \
		"$(DESTDIR)$(DOCDIR)/README.md"
	rm -f "$(DESTDIR)$(DOCDIR)"/docs/*.md "$(DESTDIR)$(DOCDIR)"/docs/*.png
	-rmdir "$(DESTDIR)$(DOCDIR)/docs" "$(DESTDIR)$(DOCDIR)" 2>/dev/null
