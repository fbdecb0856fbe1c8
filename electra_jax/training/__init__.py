"""Pretraining: the run's checks, the optimizer, the compiled data-parallel step and its loop.

docs/layout.md names each module's job.
"""
