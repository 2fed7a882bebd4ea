"""The Trio service around the sans-IO protocol core and the store."""
