"""What coordinates the workers and ticks: shard cursors and uptime, tenants, limits
and breakers, create keys, and the transitions that change them."""
