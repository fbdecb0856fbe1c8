"""The ground floor every other package stands on; it imports nothing above it.

config.py    the pretraining config (every field and its default) and config files
cli.py       what every command shares: a user's mistake ends as one `electra_jax: error:` line
errors.py    UsageError, the error a user can fix
storage.py   the run directory's files, in a local directory or at a URI (gs://, s3://)
run_lock.py  one process at a time in a run's directory
interrupts.py  SIGTERM and Ctrl-C while a command trains: save, stop, exit unfinished
bounds.py    the ranges numeric fields must lie in
"""
