# mk/deb.mk: the Debian package (debian/, debhelper, dpkg-buildpackage).
#
#   make deb       install the packaging tools if missing, then build
#                  build/deb/hf3fs-metad_<VERSION>_<arch>.deb (and its
#                  -dbgsym) and run lintian on it: an error or a warning fails
#   make test-deb  make deb, then tests/package/test_package.py: the package
#                  unpacked with dpkg-deb -x (nothing installed) serves a vLLM
#                  and an SGLang session and its module loads into redis-server
#
# dpkg-buildpackage runs on a copy of the tree's files (git ls-files, so
# uncommitted changes are in, build/ is not) in build/deb/src/, so that its
# clean step and its output next to the tree touch neither build/ nor the
# folder above. The copy builds from scratch: about a minute on 2 cores.
# debian/changelog's version must be VERSION's (checked first).

DEB_DEPS    := debhelper dpkg-dev fakeroot lintian build-essential $(BUILD_DEPS)
DEB_DIR     := build/deb
DEB_ARCH     = $(shell dpkg --print-architecture)
DEB_FILE     = $(DEB_DIR)/hf3fs-metad_$(HF3FS_VERSION)_$(DEB_ARCH).deb

.PHONY: deb deb-version test-deb

deb-version:
	@v=$$(sed -n '1s/^hf3fs-metad (\([^)]*\)).*/\1/p' debian/changelog); \
	if [ "$$v" != "$(HF3FS_VERSION)" ]; then \
	    echo "debian/changelog's first entry is version '$$v', VERSION is '$(HF3FS_VERSION)':" \
	         "add an entry (dch -v $(HF3FS_VERSION))" >&2; exit 1; fi

deb: deb-version
	@./tests/ensure-deps.sh $(DEB_DEPS)
	rm -rf $(DEB_DIR)
	mkdir -p $(DEB_DIR)/src/hf3fs-metad-$(HF3FS_VERSION)
	git ls-files -z --cached --others --exclude-standard | \
	    xargs -0 sh -c 'for f; do [ -e "$$f" ] && printf "%s\0" "$$f"; done' sh | \
	    tar --null -T - -cf - | tar -xf - -C $(DEB_DIR)/src/hf3fs-metad-$(HF3FS_VERSION)
	cd $(DEB_DIR)/src/hf3fs-metad-$(HF3FS_VERSION) && \
	    DEB_BUILD_OPTIONS="parallel=$(BUILD_JOBS)" dpkg-buildpackage -us -uc -b
	mv $(DEB_DIR)/src/*.deb $(DEB_DIR)/
	rm -rf $(DEB_DIR)/src
	lintian --fail-on error,warning --info $(DEB_DIR)/*.deb
	@echo "built $(DEB_FILE)"

test-deb: deb
	$(PYTHON) tests/package/test_package.py $(DEB_FILE)
