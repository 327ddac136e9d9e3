"""The README's signature check is code people copy: it must verify what dynacron signs."""

from __future__ import annotations

import re
import time
from typing import Any

from dynacron.domain.executions.signing import signature_header
from tests.support import ROOT


def readme_verifier() -> Any:
    readme = (ROOT / "README.md").read_text()
    (snippet,) = [s for s in re.findall(r"```python\n(.*?)```", readme, re.S) if "hmac" in s]
    namespace: dict[str, Any] = {}
    exec(compile(snippet, "README.md", "exec"), namespace)
    return namespace["from_dynacron"]


def test_the_readme_handler_check_accepts_dynacron_signatures_and_nothing_else() -> None:
    verify = readme_verifier()
    body = b'{"task_id":"t","payload":{}}'
    now = int(time.time())
    header = signature_header(["new", "old"], now, body)
    assert verify(header, body, "new")
    assert verify(header, body, "old")
    assert not verify(header, body, "other")
    assert not verify(header, body + b" ", "new")
    assert not verify(signature_header(["new"], now - 301, body), body, "new")
    assert not verify("garbage", body, "new")
