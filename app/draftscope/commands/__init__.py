"""Subcommands of the `draftscope` command line, one module per group."""
