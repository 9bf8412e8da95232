"""The torch backend and what only it uses: loading Hugging Face and GGUF models into torch, the
precision choice, attention kernels and tree masks, the static cache, CUDA step graphs and the
CPU linear layout."""
