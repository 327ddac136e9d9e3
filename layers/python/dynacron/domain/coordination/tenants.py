"""Tenants: whose a task, an execution or a dead letter is, and the limits an
operator sets for one tenant apart from the deployment's defaults."""

from __future__ import annotations

from dataclasses import dataclass

from dynacron.domain.tasks.urls import tenant_private_networks

# The tenant of a caller without identity in local mode, and of records stored
# before tenants existed.
DEFAULT_TENANT = "default"

# The most tasks an operator may let one tenant hold: 10 million.
MAX_TENANT_TASKS = 10_000_000
# The fastest an operator may let one tenant call the API, per API instance.
MAX_TENANT_RATE = 10_000.0


@dataclass(frozen=True)
class TenantQuota:
    """What an operator set for one tenant; None: the deployment's default."""

    max_tasks: int | None = None
    rate_per_second: float | None = None
    # Private ranges its handler URLs may reach (decision 0050); empty: none.
    private_networks: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.max_tasks is not None and not 1 <= self.max_tasks <= MAX_TENANT_TASKS:
            raise ValueError(f"max_tasks must be 1 to {MAX_TENANT_TASKS:,}")
        if self.rate_per_second is not None and not 0 <= self.rate_per_second <= MAX_TENANT_RATE:
            raise ValueError(f"the rate must be 0 (no limit) to {MAX_TENANT_RATE:g} a second")

    def effective(
        self,
        default_max_tasks: int,
        default_rate: float,
        stack_private_networks: tuple[str, ...] = (),
    ) -> EffectiveQuota:
        """This tenant's limits: its own where set, else the defaults given; its
        private ranges, those of its grant inside the stack's."""
        return EffectiveQuota(
            max_tasks=default_max_tasks if self.max_tasks is None else self.max_tasks,
            rate_per_second=default_rate if self.rate_per_second is None else self.rate_per_second,
            own_max_tasks=self.max_tasks is not None,
            own_rate=self.rate_per_second is not None,
            private_networks=tenant_private_networks(self.private_networks, stack_private_networks),
        )


@dataclass(frozen=True)
class EffectiveQuota:
    """The limits a tenant is held to, and which of them are its own (not defaults)."""

    max_tasks: int
    rate_per_second: float
    own_max_tasks: bool
    own_rate: bool
    private_networks: tuple[str, ...] = ()
