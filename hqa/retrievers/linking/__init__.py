"""Entity and relation linking, over the label store or a live API."""
