"""The HTTP API: routes, and the one place errors become HTTP responses."""
