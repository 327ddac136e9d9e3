"""``dynacron console``: open the web console on a deployed API (decision 0029).

The proxy, httpx and botocore are imported when the command runs, so that the
rest of the CLI starts without them.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

console = Console(stderr=True, highlight=False)


def console_command(
    url: Annotated[
        str,
        typer.Option(
            "--url",
            envvar="DYNACRON_URL",
            help="The deployed API's URL, its stage included (the stack's ApiUrl output)",
        ),
    ],
    port: Annotated[
        int, typer.Option(min=0, max=65535, help="Port on 127.0.0.1 (0: any free one)")
    ] = 8081,
    region: Annotated[
        str | None,
        typer.Option(
            help="The API's region, for SigV4 (default: from an execute-api URL, "
            "else your AWS configuration)"
        ),
    ] = None,
    api_key: Annotated[
        str | None,
        typer.Option(
            "--api-key",
            envvar="DYNACRON_API_KEY",
            help="Send this API key instead of signing (for an API that takes keys without IAM)",
        ),
    ] = None,
) -> None:
    """Serve the web console on 127.0.0.1 and forward its calls to a deployed API,
    signed with your AWS credentials (SigV4), like `kubectl proxy`.

    Only a tab opened on the printed address (its fragment carries this run's
    secret, which the page sends with each call) may use it; the API sees every
    call as yours.
    """
    from dynacron.client.api_client import ApiUnreachable, SigV4Auth
    from dynacron.console.proxy import ConsoleProxy, Upstream, api_base, region_of

    try:
        base = api_base(url)
    except ValueError as error:
        console.print(f"[red]error:[/red] --url {error}", soft_wrap=True)
        raise typer.Exit(2) from None
    if api_key:
        upstream = Upstream.open(base, api_key=api_key)
        how = "with the API key given (not signed)"
    else:
        signing_region = region or region_of(base) or _configured_region()
        if signing_region is None:
            console.print(
                "[red]error:[/red] which region is the API in? give --region (or set AWS_REGION)",
                soft_wrap=True,
            )
            raise typer.Exit(2)
        try:
            auth = SigV4Auth(region=signing_region)
        except ApiUnreachable:
            console.print(
                "[red]error:[/red] no AWS credentials found: sign in as you would for the "
                "AWS CLI (`aws sso login`, AWS_PROFILE, the AWS_ACCESS_KEY_ID variables), "
                "or give --api-key",
                soft_wrap=True,
            )
            raise typer.Exit(1) from None
        upstream = Upstream.open(base, auth=auth)
        how = f"signed (SigV4, execute-api, {signing_region}) with your AWS credentials"
    try:
        # What a request carried is printed as text, never as markup.
        proxy = ConsoleProxy(
            upstream,
            port,
            on_refusal=lambda line: console.print(line, markup=False, soft_wrap=True),
        )
    except OSError as error:
        upstream.close()
        console.print(f"[red]could not start:[/red] {error}. Is port {port} already in use?")
        raise typer.Exit(1) from None
    console.print("[bold green]dynacron console[/bold green] is running  (Ctrl-C to stop)")
    console.print(f"  API           {base}, every call {how}", soft_wrap=True)
    console.print(
        "  session       the address below opens the console in a browser tab; it holds "
        "this run's secret: keep it to yourself",
        soft_wrap=True,
    )
    console.print(f"  open          {proxy.login_url}", soft_wrap=True)
    try:
        proxy.serve_forever()
    except KeyboardInterrupt:
        console.print("stopping…")
    finally:
        proxy.server_close()


def _configured_region() -> str | None:
    import boto3

    region: str | None = boto3.Session().region_name
    return region
