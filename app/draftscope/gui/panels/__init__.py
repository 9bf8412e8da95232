"""The inspection docks: accepted drafts (drafts), each step's tree (trie_view), the live speed-up
(speedup), and the panels' shared frame (inspection)."""
