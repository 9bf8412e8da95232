"""Peak memory of reading a datastore source without building: shows that reading streams.

python scripts/read_memory.py chat:PATH
"""

import sys
import time

from draftscope.datastore.records import SkipLog
from draftscope.datastore.sources import Source
from draftscope.sysinfo import peak_rss_mb

base = peak_rss_mb()
source = Source.parse(sys.argv[1])
files = source.files()
size = sum(f.stat().st_size for f in files)
t0 = time.perf_counter()
items = sum(1 for _ in source.iter_items(files, SkipLog()))
print(
    f"{source.spec}: {size / 2**20:,.0f} MiB, {items:,} records in {time.perf_counter() - t0:.1f} s; "
    f"peak RSS {peak_rss_mb():.0f} MiB ({base:.0f} MiB before reading)"
)
