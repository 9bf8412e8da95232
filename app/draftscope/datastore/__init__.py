"""Qt-free datastore building: sources -> tokens -> ``draftscope.retrieval.Writer``."""
