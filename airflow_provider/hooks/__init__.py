"""``ZerobusHook``: the one place the provider talks to Zerobus, the catalog and read-back."""
