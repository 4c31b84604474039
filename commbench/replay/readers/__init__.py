"""One reader per trace format; each turns one file into a Trace of Collective records in issue order."""
