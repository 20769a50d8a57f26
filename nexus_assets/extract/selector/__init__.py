"""The trained selector of `embedded-v4` (docs/quality.md): features, the shipped weights, the decision."""

# The extractor identity of answers the selector gives (stored with each answer, in its key).
SELECTOR_VERSION = "embedded-v4"
# The trained selector's second release (`v5.py`): v4's reading, features from the sentence's vector
# within its run, its own weights (`weights_v5.npz`). Opt-in, like v4.
V5_VERSION = "embedded-v5"
