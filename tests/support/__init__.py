"""What the tests share: one fake backend, the one-line-error check, the tolerance check, and the
sweep helpers that run the real runner and read its CSV back."""
