# zsh and fish, the shells tests/unit/cli/test_completion.py runs `servingctl completion zsh|fish`
# in (it fails, not skips, when one is missing): Debian's packages, installed with apt-get when
# missing (CI and the developers' machines run as root).
SHELLS_STAMP := .cache/shells.stamp

$(SHELLS_STAMP):
	@command -v zsh >/dev/null && command -v fish >/dev/null || { \
		command -v apt-get >/dev/null || { echo "zsh and fish not found: install both (the completion tests run in them)"; exit 1; }; \
		apt-get update -qq && apt-get install -y -qq zsh fish; }
	mkdir -p $(@D) && touch $@

.PHONY: shells
shells: $(SHELLS_STAMP) ## zsh and fish (Debian packages) for the completion tests

unit: $(SHELLS_STAMP)
TEST_DEPS += $(SHELLS_STAMP)
