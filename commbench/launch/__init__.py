"""Launching: how the ranks of a run start, and where this process sits among them.

    env      who started this process (detect(): a launcher, or a user), torch's env:// variables
    slurm    SLURM's compressed node lists and per-node task counts, for env
    start    start(): run in-process as one rank of a launcher's job, or check the host and spawn
             local ranks on loopback (the rendezvous store, the relay of their output, the supervisor)
    horovod  Horovod's Gloo rendezvous on loopback, for spawned Horovod ranks
    worker   one rank's entry point (`python -m commbench.launch.worker`); it runs the rank
             program its SweepConfig names (`module:function`, commbench/run/ by default)

Launch, the value every rank receives, lives in commbench/backends/job.py, below the layers that
receive it.
"""
