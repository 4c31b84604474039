"""One rank's sweep: what each rank runs once its process group is joined (how the ranks start is
commbench/launch/'s). The modules, in the order a rank meets them:

    config      SweepConfig, the validated options every rank receives as JSON
    runner      run_rank(): join the group, run the rank program the config names (the sweep's)
    session     open_session(): agree, form the groups, open rank 0's outputs
    agreement   agree() / share_refusal(): one configuration and one refusal across ranks; RunFacts
    groups      --group: the rank groups of world, intra or inter
    plan        the cases to measure, their memory, the groups of cases alive together
    rotation    the rotation over a group's cases in rounds (in_rounds(), isolate's too), rows as they end
    iterations  one visit of a case: warm-up and its blocks, a block, --precision, the check
    harness     TimedCase: the timed loop and its correctness check
    timers      how a sample is read: a host clock on CPU, CUDA events on a GPU
    overlap     --overlap's compute kernel
    sink        rank 0's rows, handed to its row outputs (results/row_outputs.py), the printed table, the progress line
    host_records  the run's record: every host's environment, the history entry
    phases      where the wall time goes: the `# time:` line's clock
    eta         progress and the time left
    resources   what this host cannot run, refused before anything starts
    heartbeat   where every rank is, in the rendezvous store
    watchdog    a collective that overruns ends its rank with a diagnosis
    failures    how a transport's errors read
"""
