"""The ground floor every other package stands on; it imports nothing above it.

docs/layout.md names each module's job.
"""
