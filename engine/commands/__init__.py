"""Subcommands of the `hearth` CLI, one module each."""
