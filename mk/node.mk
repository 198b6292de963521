# Node tools the Python tests call (asl-validator for the state machine files), pinned by
# package-lock.json and installed with `npm ci` so every machine gets the same tree.
NODE_STAMP := node_modules/.stamp

export SERVINGCTL_ASL_VALIDATOR := $(abspath node_modules/.bin/asl-validator)

$(NODE_STAMP): package.json package-lock.json
	@command -v npm >/dev/null || { echo "npm not found: the ASL tests need node's asl-validator"; exit 1; }
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

.PHONY: node
node: $(NODE_STAMP) ## npm tools (asl-validator)

TEST_DEPS += $(NODE_STAMP)
