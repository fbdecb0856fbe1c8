"""Pretraining: the compiled data-parallel step and the loop around it.

train.py            the train state, the step (generator + discriminator in one jit), the loop
batches.py          the run's vocabulary and examples in its workdir, and batches on the mesh
checkpoint.py       Orbax checkpoints: save, restore, refuse another run's, fall back if damaged
abandoned_reads.py  quiets what a failed Orbax restore leaves behind after its one error line
nonfinite.py        NaN/Inf on the device: stop at the next log, or skip the update
health.py           a warning when an evaluation shows the discriminator at chance
report.py           metrics.jsonl, TensorBoard and the log lines of a run
aot.py              the real steps compiled for a TPU slice on a CPU host (benchmark --topology)
"""
