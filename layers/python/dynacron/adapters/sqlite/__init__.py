"""The embedded adapter set: every port on one SQLite file (WAL), shared by processes."""
