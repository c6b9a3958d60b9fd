"""The `arkdma` command: a thin layer over the library; every command is a function tests can call."""
