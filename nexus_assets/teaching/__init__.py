"""A person teaches a topic what to keep (issue 53): `nexus keep` / `nexus drop` and the selector
version each topic is selected with (issue 49 item 4)."""
