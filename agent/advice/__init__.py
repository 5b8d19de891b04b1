"""Which instance to rent next time: the catalog, the estimate, the words, the part (docs/advice.md)."""
