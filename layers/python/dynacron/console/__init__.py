"""The web console: static pages that call the HTTP API from the browser.

Served on loopback only, by local mode (``/console`` beside the API) and by
``dynacron console`` in front of a deployed API; never part of the Lambda layer.
Every asset ships in this package: the page fetches nothing from elsewhere.
"""
