"""The record's indexes (DESIGN §3.1, §8): full-text (BM25) and dense over every passage, beside the vault."""
