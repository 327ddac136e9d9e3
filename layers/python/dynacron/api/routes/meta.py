"""The API's own description: the OpenAPI document, and the page that shows it."""

from __future__ import annotations

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response

from dynacron.api.openapi import DOCS_PATH, OPENAPI_PATH, CallerIdentities, security_of
from dynacron.version import __version__


def include_meta_routes(app: APIGatewayRestResolver, settings: CallerIdentities) -> None:
    """Serve the document of every route ``app`` has (include it last) and its page.

    On the resolver, not a ``Router``: both are made from the resolver's routes.
    Neither is in the document, and neither derives a tenant (``PUBLIC_PATHS``).
    """

    @app.get(OPENAPI_PATH, include_in_schema=False)
    def openapi() -> Response[str]:
        return Response(
            status_code=200,
            content_type="application/json",
            body=app.get_openapi_json_schema(
                title="dynacron", version=__version__, **security_of(settings)
            ),
        )

    # Swagger UI with its script and styles inlined: the page fetches nothing else.
    app.enable_swagger(
        path=DOCS_PATH, title="dynacron", version=__version__, **security_of(settings)
    )
