"""What happened when: topic transitions, syncs, seal snapshots, runs since a time (`vault.history`)."""
