"""Charts of result CSVs, one module per job.

- `plot`: what `commbench plot` (and `sweep --plot`) runs: the panels of a frame, their charts,
  and the process pool that draws them into files.
- `size`, `overlap`, `speedup`: one chart kind each (latency and busbw against size, or bars at a
  single size; communication/computation overlap; speedup over a family's baseline).
- `grouping`: which rows share a chart (panels) and a line (series), and the facts in its title.
- `style`: how a variant and a run look (colour, line style, marker, hatch) and variant families.
- `axes`: axis and drawing helpers every chart kind shares (`size_axis`, `latency_axis`, ...);
  the model and trend charts use them too.
- `render`: a `Chart`, its PNG or SVG bytes, and the files and folders charts are written into.

Figures are built as matplotlib `Figure` objects drawn by the Agg canvas, never through pyplot:
no global figure state, no display needed, and tests can inspect what `build_charts` returns.
"""
