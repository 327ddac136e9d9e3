"""One construct per concern; ``DynacronScheduler`` composes them."""
