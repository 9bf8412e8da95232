"""Qt-free decoding engine: models, drafters, verification, the decoder loop and its events."""
