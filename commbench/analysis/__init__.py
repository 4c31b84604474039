"""What is made from result CSVs: charts, the HTML report, run-to-run comparison, SyncBN tables."""
