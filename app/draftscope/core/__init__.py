"""The application core every face shares: the runtime (a loaded model and its drafters), the
session (a conversation and its answers), the drafter factory, settings checks and words."""
