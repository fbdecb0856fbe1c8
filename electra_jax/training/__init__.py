"""Pretraining: the run's checks, the optimizer, the compiled data-parallel step and its loop.

validation.py       the config checked before anything runs: one error naming the field and fix
optim.py            AdamW with the original's details, warmup and linear decay, layer-wise decay
flops.py            the model FLOPs of a training step, per objective
train.py            the train state, the step (generator + discriminator in one jit), the loop
rng.py              the run's random keys: the generator's, each step's, rbg on TPU slices
batches.py          the run's examples in its workdir, and batches on the mesh
checkpoint.py       Orbax checkpoints: save, restore, refuse another run's, fall back if damaged
abandoned_reads.py  quiets what a failed Orbax restore leaves behind after its one error line
nonfinite.py        NaN/Inf on the device: stop at the next log, or skip the update
health.py           a warning when an evaluation shows the discriminator at chance
report.py           metrics.jsonl, TensorBoard and the log lines of a run
two_stage.py        the paper's two-stage training: the generator first, then the discriminator
compile_cache.py    compiled steps kept on disk between runs
compiled_program.py reading a compiled program: memory, cost, collectives
aot.py              the train step compiled for a TPU slice on a CPU host (python -m electra_jax.compile)
"""
