"""Model pairs: loaders for real drafter/verifier pairs and the tiny in-memory pair (tiny.py)."""
