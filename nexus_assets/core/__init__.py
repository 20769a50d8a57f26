"""The compiler: pure functions from runs, topics and pointers to bricks and manifests.

Nothing in this package imports Dagster or touches files or databases.
"""
