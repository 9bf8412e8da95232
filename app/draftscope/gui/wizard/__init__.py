"""The datastore wizard: its pages (sources_page, build_pages), the window that holds them (wizard)
and the Qt-free jobs they run (jobs: tokenising, building, distilling)."""
