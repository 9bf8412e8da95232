"""Qt-free datastore building: sources -> tokens -> ``draftscope.retrieval.Writer``.

The CLI (``draftscope datastore``) and the GUI's wizard both drive :func:`build_datastore`.
"""

from draftscope.datastore.pipeline import BuildOptions, BuildReport, build_datastore
from draftscope.datastore.progress import CancelToken, Progress
from draftscope.datastore.sources import DatastoreError, Source, SourceOptions

__all__ = [
    "BuildOptions",
    "BuildReport",
    "CancelToken",
    "DatastoreError",
    "Progress",
    "Source",
    "SourceOptions",
    "build_datastore",
]
