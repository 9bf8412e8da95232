"""The llama.cpp backend and what it needs: llama-cpp-python's library, its builds and
self-test, GGUF files (checked before a C library reads them; written for tests), RPC workers and
the child process that isolates them."""
