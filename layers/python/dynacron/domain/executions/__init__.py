"""Executions: their states, records, retries and signatures, and the transitions
that begin, renew, end and redrive them."""
