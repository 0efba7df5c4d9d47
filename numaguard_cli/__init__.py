"""The ``numaguard`` command line: one console script, one subcommand per job."""
