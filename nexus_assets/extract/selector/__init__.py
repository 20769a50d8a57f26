"""The trained selector of `embedded-v4` (DESIGN §5): features, the shipped weights, the decision."""

# The extractor identity of answers the selector gives (stored with each answer, in its key).
SELECTOR_VERSION = "embedded-v4"
