"""`commbench replay`: a real job's collectives, read from the traces PyTorch writes (profiler
traces, Execution Traces, Flight Recorder dumps) and measured again on this cluster."""
