# Included by functions/<name>/Makefile, which sets LOGICAL_ID. `sam build`
# (template.yaml: Metadata BuildMethod makefile, CodeUri functions/<name>/)
# runs build-<LogicalId> with ARTIFACTS_DIR set; the recipe is the root
# Makefile's `bootstrap`. The module root is found from this file's real
# path; samconfig.toml sets build_in_source so SAM runs it in place.
FUNCTION := $(notdir $(patsubst %/,%,$(dir $(realpath $(firstword $(MAKEFILE_LIST))))))
ROOT := $(abspath $(dir $(realpath $(lastword $(MAKEFILE_LIST))))..)

.PHONY: build-$(LOGICAL_ID)
build-$(LOGICAL_ID):
	@test -f "$(ROOT)/go.mod" || { echo "module root not found from $(ROOT): run sam build --build-in-source" >&2; exit 1; }
	@test -n "$(ARTIFACTS_DIR)" || { echo "ARTIFACTS_DIR is not set (sam build sets it)" >&2; exit 1; }
	$(MAKE) --no-print-directory -C "$(ROOT)" bootstrap FUNCTION=$(FUNCTION) OUT="$(ARTIFACTS_DIR)/bootstrap"
