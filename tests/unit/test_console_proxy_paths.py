"""What ``dynacron console`` forwards where: the API's URL, its region, the paths it takes."""

from __future__ import annotations

import pytest

from dynacron.console.proxy import Refused, Session, api_base, api_target, region_of

API = "https://abc123.execute-api.eu-west-1.amazonaws.com/prod"


@pytest.mark.parametrize(
    ("url", "base"),
    [
        (API, API),
        (API + "/", API),
        ("https://scheduler.example.com", "https://scheduler.example.com"),
        ("https://scheduler.example.com/v1/", "https://scheduler.example.com/v1"),
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
    ],
)
def test_the_base_keeps_the_stage_and_drops_a_trailing_slash(url: str, base: str) -> None:
    assert api_base(url) == base
    # the stage prefix: console-origin /tasks is <url>/tasks
    assert api_base(url) + api_target("/tasks", "limit=5") == f"{base}/tasks?limit=5"


@pytest.mark.parametrize(
    "url",
    [
        "abc123.execute-api.eu-west-1.amazonaws.com/prod",
        "ftp://api.example/prod",
        "http://abc123.execute-api.eu-west-1.amazonaws.com/prod",
        "https://user:secret@api.example/prod",
        "https://api.example/prod?stage=dev",
        "https://api.example/prod#x",
    ],
)
def test_a_url_to_sign_for_must_be_plain_https(url: str) -> None:
    with pytest.raises(ValueError, match=r"https|base URL|http\(s\)"):
        api_base(url)


@pytest.mark.parametrize(
    ("url", "region"),
    [
        (API, "eu-west-1"),
        ("https://a1b2c3.execute-api.cn-north-1.amazonaws.com.cn/prod", "cn-north-1"),
        ("https://scheduler.example.com/prod", None),
        ("https://abc.execute-api.eu-west-1.amazonaws.com.attacker.example/prod", None),
    ],
)
def test_the_region_comes_from_an_execute_api_host(url: str, region: str | None) -> None:
    assert region_of(url) == region


@pytest.mark.parametrize(
    ("path", "query", "target"),
    [
        ("/tasks", "", "/tasks"),
        (
            "/tasks/5f0c/executions",
            "limit=10&next_token=abc%3D",
            "/tasks/5f0c/executions?limit=10&next_token=abc%3D",
        ),
        (
            "/dead-letters/t_20261130T120000.000Z/redrive",
            "",
            "/dead-letters/t_20261130T120000.000Z/redrive",
        ),
        ("/forecast", "hours=24", "/forecast?hours=24"),
        ("/schedules/preview", "", "/schedules/preview"),
        ("/tenant", "", "/tenant"),
        ("/openapi.json", "", "/openapi.json"),
    ],
)
def test_the_api_s_paths_go_on_as_they_are(path: str, query: str, target: str) -> None:
    assert api_target(path, query) == target


@pytest.mark.parametrize(
    ("query", "signable"),
    [
        # URLSearchParams' spelling: what SigV4 leaves as it is stays, the rest is escaped
        (
            "status=FAILED&since=2026-12-01T00%3A00%3A00Z",
            "status=FAILED&since=2026-12-01T00%3A00%3A00Z",
        ),
        ("tag=env:prod&tag=team", "tag=env%3Aprod&tag=team"),
        ("tag=team%3Abilling+ops", "tag=team%3Abilling%20ops"),
        ("next_token=a%2Bb%2F%3D", "next_token=a%2Bb%2F%3D"),
        ("next_token=a+b", "next_token=a%20b"),
        ("limit=5&&flag", "limit=5&flag="),
        ("name=~caf%C3%A9", "name=~caf%C3%A9"),
    ],
)
def test_a_query_is_spelled_as_sigv4_canonicalises_it(query: str, signable: str) -> None:
    """botocore signs the query as the URL spells it; API Gateway checks the
    canonical spelling (each name and value decoded, then every byte but
    ``A-Za-z0-9-_.~`` escaped): only a URL already spelled so verifies there."""
    assert api_target("/tasks", query) == f"/tasks?{signable}"


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/", 400),
        ("/tasks/", 400),
        ("/tasks/../../dev/tasks", 400),
        ("/tasks/./x", 400),
        ("/tasks/%2e%2e", 400),
        ("/tasks/%2E./x", 400),
        ("/tasks%2F..", 400),
        ("/tasks/%5c..", 400),
        ("/tasks/a b", 400),
        ("/tasks/\x00", 400),
        ("/callbacks/x/complete", 404),
        ("/docs", 404),
        ("/docs/swagger.js", 404),
        ("/console", 404),
        ("/prod/tasks", 404),
    ],
)
def test_anything_else_is_refused(path: str, status: int) -> None:
    with pytest.raises(Refused) as refused:
        api_target(path, "")
    assert refused.value.reply.status == status


def test_a_query_with_a_space_or_a_control_character_is_refused() -> None:
    for query in ("a=b c", "a=\r\nX-Injected: 1"):
        with pytest.raises(Refused) as refused:
            api_target("/tasks", query)
        assert refused.value.reply.status == 400


def test_the_session_is_held_by_its_secret_sent_once() -> None:
    session = Session()
    assert len(session.secret) == 43  # 256 bits, URL-safe
    assert session.holds([session.secret])
    assert not session.holds([])
    assert not session.holds(["wrong"])
    assert not session.holds(["é"])  # any text a header can carry, compared safely
    assert not session.holds([session.secret, session.secret])
    assert not session.holds(["other", session.secret])
    assert Session().secret != session.secret
