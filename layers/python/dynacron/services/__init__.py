"""Use cases: register and read tasks, tick a shard, run an execution."""
