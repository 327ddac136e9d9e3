"""A WAF web ACL on the API's stage: no single source address can take the stage's
throttle from everyone else (issue 23).

API Gateway's throttles are per stage and method, shared by every caller. The two
token-authorised callback methods take anonymous requests (decision 0023): without a
limit per source, one client sending bad tokens at 100 requests a second would use
up a callback method's whole throttle, and every tenant's heartbeats and
completions would hear 429 until their leases ran out. Two rate-based rules, keyed
on the source IP, count each address's requests over a minute: one for the
callback paths, one for every other path (IAM-signed: there one address's flood,
signed or not, is turned away by WAF before API Gateway spends anything on it). An
address over its limit is answered 429 by WAF for as long as it stays over.
"""

from __future__ import annotations

import json

from aws_cdk import Duration, Fn, Stack
from aws_cdk import aws_apigateway as apigateway
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_wafv2 as wafv2
from constructs import Construct

from dynacron.definitions.callbacks import CALLBACKS_RESOURCE
from infra.config import SchedulerConfig

# Every callback path holds this segment (``/<stage>/callbacks/...`` on the
# execute-api URL, ``/callbacks/...`` behind a custom domain's base path).
CALLBACK_PATH_SEGMENT = f"/{CALLBACKS_RESOURCE}/"
# The rules' names, and their CloudWatch metrics' (AWS/WAFV2, dimension Rule).
CALLBACK_RULE = "CallbacksPerSourceIp"
API_RULE = "ApiPerSourceIp"
# The window over which WAF counts an address's requests: the shortest it offers.
RATE_WINDOW_SECONDS = 60
THROTTLED_BODY_KEY = "throttled"
THROTTLED_BODY = json.dumps(
    {
        "type": "about:blank",
        "title": "Too many requests",
        "status": 429,
        "detail": "too many requests from this address; retry later",
    }
)


def _visibility(metric_name: str) -> wafv2.CfnWebACL.VisibilityConfigProperty:
    return wafv2.CfnWebACL.VisibilityConfigProperty(
        cloud_watch_metrics_enabled=True,
        metric_name=metric_name,
        sampled_requests_enabled=True,
    )


def _per_source_ip(
    name: str, priority: int, limit: int, scope: wafv2.CfnWebACL.StatementProperty
) -> wafv2.CfnWebACL.RuleProperty:
    return wafv2.CfnWebACL.RuleProperty(
        name=name,
        priority=priority,
        statement=wafv2.CfnWebACL.StatementProperty(
            rate_based_statement=wafv2.CfnWebACL.RateBasedStatementProperty(
                aggregate_key_type="IP",
                limit=limit,
                evaluation_window_sec=RATE_WINDOW_SECONDS,
                scope_down_statement=scope,
            )
        ),
        action=wafv2.CfnWebACL.RuleActionProperty(
            block=wafv2.CfnWebACL.BlockActionProperty(
                custom_response=wafv2.CfnWebACL.CustomResponseProperty(
                    response_code=429,
                    custom_response_body_key=THROTTLED_BODY_KEY,
                    response_headers=[
                        wafv2.CfnWebACL.CustomHTTPHeaderProperty(
                            name="Retry-After", value=str(RATE_WINDOW_SECONDS)
                        )
                    ],
                )
            )
        ),
        visibility_config=_visibility(name),
    )


class ApiFirewall(Construct):
    """The stage's web ACL: per-source-IP rate rules, the callbacks' apart."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: SchedulerConfig,
        stage: apigateway.Stage,
    ) -> None:
        super().__init__(scope, construct_id)
        callbacks = wafv2.CfnWebACL.StatementProperty(
            byte_match_statement=wafv2.CfnWebACL.ByteMatchStatementProperty(
                field_to_match=wafv2.CfnWebACL.FieldToMatchProperty(uri_path={}),
                positional_constraint="CONTAINS",
                search_string=CALLBACK_PATH_SEGMENT,
                text_transformations=[
                    wafv2.CfnWebACL.TextTransformationProperty(priority=0, type="NONE")
                ],
            )
        )
        not_callbacks = wafv2.CfnWebACL.StatementProperty(
            not_statement=wafv2.CfnWebACL.NotStatementProperty(statement=callbacks)
        )
        self.metric_name = f"dynacron-{config.stage}-api"
        self.web_acl = wafv2.CfnWebACL(
            self,
            "WebAcl",
            scope="REGIONAL",
            default_action=wafv2.CfnWebACL.DefaultActionProperty(allow={}),
            description="dynacron API: requests per source address, callbacks apart",
            visibility_config=_visibility(self.metric_name),
            custom_response_bodies={
                THROTTLED_BODY_KEY: wafv2.CfnWebACL.CustomResponseBodyProperty(
                    content_type="APPLICATION_JSON", content=THROTTLED_BODY
                )
            },
            rules=[
                _per_source_ip(CALLBACK_RULE, 0, config.callback_ip_rate_limit, callbacks),
                _per_source_ip(API_RULE, 1, config.api_ip_rate_limit, not_callbacks),
            ],
        )
        self.association = wafv2.CfnWebACLAssociation(
            self, "Association", resource_arn=stage.stage_arn, web_acl_arn=self.web_acl.attr_arn
        )
        self.rules = (CALLBACK_RULE, API_RULE)
        # CloudFormation names the web ACL; its Ref is "name|id|scope".
        self.web_acl_name = Fn.select(0, Fn.split("|", self.web_acl.ref))

    def metric_blocked(self, rule: str, period: Duration) -> cloudwatch.Metric:
        """Requests one rule answered 429 (AWS/WAFV2 BlockedRequests)."""
        return cloudwatch.Metric(
            namespace="AWS/WAFV2",
            metric_name="BlockedRequests",
            dimensions_map={
                "WebACL": self.web_acl_name,
                "Region": Stack.of(self).region,
                "Rule": rule,
            },
            statistic="Sum",
            period=period,
            label=f"blocked by {rule}",
        )
