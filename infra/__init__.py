"""The CDK app that deploys dynacron to AWS (see docs/deploy.md)."""
