"""Tasks: their specs, records, changes, tags and handler URLs, how a due one is
claimed, and the transitions that change them."""
