"""The API stage's WAF web ACL (issue 23): one source address cannot take the
throttles every tenant's callbacks share. Read from the synthesised templates."""

from __future__ import annotations

import json
from typing import Any

from infra.config import SchedulerConfig
from tests.infra.conftest import STAGE, USER_CONFIG, Synthesized, resources_of
from tests.infra.test_template import method_paths

CONFIG = SchedulerConfig()


def web_acl(template: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    ((logical_id, acl),) = resources_of(template, "AWS::WAFv2::WebACL").items()
    return logical_id, acl


def rules(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {rule["Name"]: rule for rule in web_acl(template)[1]["Rules"]}


def matches(statement: dict[str, Any], path: str) -> bool:
    """WAF's verdict on a request's URI path, for the statements these rules use."""
    if "NotStatement" in statement:
        return not matches(statement["NotStatement"]["Statement"], path)
    byte_match = statement["ByteMatchStatement"]
    assert byte_match["FieldToMatch"] == {"UriPath": {}}
    assert byte_match["TextTransformations"] == [{"Priority": 0, "Type": "NONE"}]
    needle = byte_match["SearchString"]
    return {
        "CONTAINS": needle in path,
        "STARTS_WITH": path.startswith(needle),
        "EXACTLY": path == needle,
    }[byte_match["PositionalConstraint"]]


def request_path(resource_path: str, stage: str = STAGE) -> str:
    """What a caller sends for a method's resource path, on the execute-api URL."""
    concrete = resource_path.replace("{execution_id}", "t1%3A2026-12-05T18%3A00%3A00Z")
    return f"/{stage}{concrete.replace('{proxy+}', 'some/path')}"


def test_a_regional_web_acl_with_metrics_is_associated_with_the_stage(
    template: dict[str, Any],
) -> None:
    logical_id, acl = web_acl(template)
    assert acl["Scope"] == "REGIONAL"
    assert acl["DefaultAction"] == {"Allow": {}}
    assert acl["VisibilityConfig"]["CloudWatchMetricsEnabled"] is True
    for rule in acl["Rules"]:
        assert rule["VisibilityConfig"]["CloudWatchMetricsEnabled"] is True
        assert rule["VisibilityConfig"]["MetricName"] == rule["Name"]
    (association,) = resources_of(template, "AWS::WAFv2::WebACLAssociation").values()
    assert association["WebACLArn"] == {"Fn::GetAtt": [logical_id, "Arn"]}
    # The stage's ARN: arn:<partition>:apigateway:<region>::/restapis/<api>/stages/<stage>.
    (rest_api,) = resources_of(template, "AWS::ApiGateway::RestApi")
    ((stage_id, stage),) = resources_of(template, "AWS::ApiGateway::Stage").items()
    assert stage["StageName"] == STAGE
    arn = json.dumps(association["ResourceArn"])
    assert '":apigateway:"' in arn
    assert "::/restapis/" in arn
    assert "/stages/" in arn
    assert json.dumps({"Ref": rest_api}) in arn
    assert json.dumps({"Ref": stage_id}) in arn


def test_each_source_address_is_limited_on_the_callbacks_and_on_the_rest(
    template: dict[str, Any],
) -> None:
    by_name = rules(template)
    assert sorted(by_name) == ["ApiPerSourceIp", "CallbacksPerSourceIp"]
    limits = {
        "CallbacksPerSourceIp": CONFIG.callback_ip_rate_limit,
        "ApiPerSourceIp": CONFIG.api_ip_rate_limit,
    }
    for name, rule in by_name.items():
        rate = rule["Statement"]["RateBasedStatement"]
        assert rate["AggregateKeyType"] == "IP"
        assert rate["Limit"] == limits[name]
        assert rate["EvaluationWindowSec"] == 60
        response = rule["Action"]["Block"]["CustomResponse"]
        assert response["ResponseCode"] == 429
        assert {"Name": "Retry-After", "Value": "60"} in response["ResponseHeaders"]
    # The limits are a single source address's share, well under what all share.
    assert CONFIG.callback_ip_rate_limit / 60 < CONFIG.callback_rate_limit
    assert CONFIG.api_ip_rate_limit / 60 < CONFIG.api_rate_limit


def test_the_callback_rule_covers_exactly_the_methods_without_iam(
    template: dict[str, Any],
) -> None:
    """Every anonymous method falls in the callback rule's scope, every signed one in
    the other rule's: each request is counted by exactly one."""
    by_name = rules(template)
    callbacks = by_name["CallbacksPerSourceIp"]["Statement"]["RateBasedStatement"]
    others = by_name["ApiPerSourceIp"]["Statement"]["RateBasedStatement"]
    methods = resources_of(template, "AWS::ApiGateway::Method")
    paths = method_paths(template)
    anonymous = {paths[k] for k, m in methods.items() if m["AuthorizationType"] == "NONE"}
    signed = {paths[k] for k, m in methods.items() if m["AuthorizationType"] != "NONE"}
    assert len(anonymous) == 2
    assert signed
    for resource_path in anonymous:
        # On the execute-api URL (the stage first) and behind a custom domain.
        for sent in (request_path(resource_path), resource_path):
            assert matches(callbacks["ScopeDownStatement"], sent), sent
            assert not matches(others["ScopeDownStatement"], sent), sent
    for resource_path in signed:
        sent = request_path(resource_path)
        assert not matches(callbacks["ScopeDownStatement"], sent), sent
        assert matches(others["ScopeDownStatement"], sent), sent


def test_the_throttled_answer_is_the_documents_problem(template: dict[str, Any]) -> None:
    _, acl = web_acl(template)
    (body,) = acl["CustomResponseBodies"].values()
    assert body["ContentType"] == "APPLICATION_JSON"
    problem = json.loads(body["Content"])
    assert problem["status"] == 429
    assert problem["title"] == "Too many requests"


def test_the_dashboard_shows_what_each_rule_blocked(template: dict[str, Any]) -> None:
    (dashboard,) = resources_of(template, "AWS::CloudWatch::Dashboard").values()
    body = json.dumps(dashboard["DashboardBody"])
    assert "AWS/WAFV2" in body
    assert "BlockedRequests" in body
    for name in rules(template):
        assert f'\\"{name}\\"' in body, name


def test_switched_off_there_is_no_web_acl_and_the_nag_reason_says_so(
    synthesized: Synthesized, user_template: dict[str, Any]
) -> None:
    """The user's stack sets api_firewall=false; the default stack's keeps it."""
    assert USER_CONFIG.api_firewall is False
    assert not resources_of(user_template, "AWS::WAFv2::WebACL")
    assert not resources_of(user_template, "AWS::WAFv2::WebACLAssociation")
    reasons = {
        path: by_rule["Annotation::AwsSolutions-APIG3"]
        for path, by_rule in synthesized.acknowledgments().items()
        if "Annotation::AwsSolutions-APIG3" in by_rule
    }
    # Only where there is no web ACL: the default stack satisfies the rule itself.
    assert [path.split("/")[0] for path in reasons] == [synthesized.user_stack]
    (reason,) = reasons.values()
    assert "api_firewall=false" in reason
    assert "anonymous" in reason
    # The old reason claimed every request is signed; the callbacks are not.
    for by_rule in synthesized.acknowledgments().values():
        for text in by_rule.values():
            assert "Every request must be SigV4-signed" not in text
            assert "left to deployments that face anonymous traffic" not in text


def test_the_callback_nag_reason_names_the_per_source_limit(synthesized: Synthesized) -> None:
    reasons = [
        by_rule["Annotation::AwsSolutions-APIG4"]
        for by_rule in synthesized.acknowledgments().values()
        if "Annotation::AwsSolutions-APIG4" in by_rule
    ]
    assert len(reasons) == 4  # two methods in each stack
    for reason in reasons:
        assert "per source address by WAF" in reason
