"""Acknowledging a cdk-nag finding: always with its reason, on the narrowest construct."""

from __future__ import annotations

from aws_cdk import Acknowledgment, Validations
from constructs import IConstruct


def acknowledge(scope: IConstruct, rule: str, reason: str) -> None:
    """Accept finding ``rule`` (e.g. ``AwsSolutions-L1``) on ``scope`` and below, for ``reason``."""
    Validations.of(scope).acknowledge(Acknowledgment(id=rule, reason=reason))
