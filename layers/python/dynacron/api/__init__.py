"""The HTTP API: a Powertools resolver of one Router per resource (routes/), its
requests and responses, and the one table where errors become HTTP answers (errors.py)."""
