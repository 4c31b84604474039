"""`commbench isolate`: a node sweep that names the slow host, GPU/CPU or link (docs/isolate.md)."""
