"""Getting models: the catalogue, downloads from PyPI (assets), the GGUFs other apps keep (local),
and resolving what the user typed into a model source (sources). Below the engine: no torch here."""
