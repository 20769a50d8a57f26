"""The trained selector of `embedded-v4` (DESIGN §5): features, the shipped weights, the decision."""
